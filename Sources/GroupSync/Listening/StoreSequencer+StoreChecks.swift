// Checks of the store on each rescan tick.
import Foundation
import Logging

extension StoreSequencer {
  /// How far the store is (a writer may have died after COMMIT, before its
  /// file reached us), and whether a program that does not use GroupSync
  /// committed (`PRAGMA data_version` moved while the history did not, by
  /// more commits than GroupSync counted as its own quiet ones); for a
  /// read-only store, whether its file was replaced.
  /// Returns why to reset when so.
  func checkStore() -> ResetReason? {
    if let readOnlyFile {
      let now = readOnlyFile.identityNow
      guard now != fileIdentity else { return nil }
      return now == nil ? .readOnlyStoreRemoved(store: store) : .readOnlyStoreReplaced(store: store)
    }
    guard let sample = sampleStore() else { return nil }
    storeSequence = sample.sequence
    // Commits were made while the snapshot was read: look again next tick,
    // against the same baseline.
    if sample.isUndecided { return nil }
    let last = lastSample
    lastSample = sample
    guard let last, sample.dataVersion != last.dataVersion, sample.sequence == last.sequence else { return nil }
    // GroupSync's own commits without a change set (bookkeeping) counted
    // themselves.
    let quiet = sample.quietCommits - last.quietCommits
    if let commits = sample.commits, let lastCommits = last.commits {
      let committed = Int64(commits &- lastCommits)
      if committed == 0 {
        // The wal-index header changed, yet nobody committed: a checkpoint
        // restarted the WAL, or a writer did and then rolled back or died.
        Logger.groupSync.info("listener '\(listener)': '\(store)' moved without a commit (a WAL restart)")
        return nil
      }
      if committed <= quiet { return nil }
    } else if quiet > 0 {
      // Commits not counted: those seen may all be GroupSync's.
      return nil
    }
    Logger.groupSync.warning("listener '\(listener)': a commit without a change set (foreign writer) seen in '\(store)'")
    ForeignCommit.record(in: inbox.ownerFolder, sequence: sample.sequence)
    return .foreignCommit
  }

  /// What the foreign-writer check compares from one tick to the next.
  struct StoreSample {
    let dataVersion: Int64
    let sequence: Int64
    /// GroupSync's commits without a change set (see ``StoreState``).
    let quietCommits: Int64
    /// The WAL's commit counter as of the snapshot; nil when it cannot be
    /// read (the check then takes any move of data_version for a commit).
    let commits: UInt32?
    /// The counter moved while the snapshot was read, on every try.
    let isUndecided: Bool
  }

  /// data_version, the sequence and the commit counter, all as of one
  /// snapshot: the counter read before and after it agree, so no commit
  /// fell in between (tried a few times while writers are busy).
  func sampleStore() -> StoreSample? {
    for attempt in 1...4 {
      guard let sample = try? reader?.sample() else { return nil }
      if !sample.counterMoved || attempt == 4 {
        return StoreSample(
          dataVersion: sample.dataVersion, sequence: sample.sequence, quietCommits: sample.quietCommits,
          commits: sample.commits,
          isUndecided: sample.counterMoved)
      }
    }
    return nil
  }
}
