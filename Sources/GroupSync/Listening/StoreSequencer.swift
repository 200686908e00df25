// Putting one store's change sets in sequence for a listener: its place,
// catch-up from the history, missing change sets and resets.
import Foundation
import GRDB
import Logging

/// Puts one store's change sets in sequence for a listener: where it is in
/// the store's sequence, the store's change sets waiting in the inbox, a
/// missing one's grace period, a durable place. For a read-only store,
/// which has no sequence, the file it last saw: a replaced file is a reset.
///
/// Used only by the listener's consuming task.
final class StoreSequencer {
  let store: String
  let storeID: UUID
  let listener: String
  let options: ListenerOptions
  /// The store's own read-only connection (writable stores only).
  let reader: StoreReader?
  /// The file as last seen (read-only stores only).
  let readOnlyFile: ReadOnlyStoreFile?
  var fileIdentity: FileIdentity?
  let cursor: DurableCursor?
  /// The listener's inbox: the store's files waiting there are read and
  /// removed through it, whatever folder it is now.
  let inbox: OwnedInbox
  private let hostileActs: HostileActs

  /// The sequence the sequencer started after.
  private(set) var startSequence: Int64 = 0
  private(set) var nextSequence: Int64 = 0
  /// Change sets in the inbox, within `window` of `nextSequence`; later
  /// ones are only noted, so memory stays bounded whatever the backlog.
  var inboxSequences = Set<Int64>()
  var moreBeyondWindow = false
  static let window: Int64 = 4096
  /// When the missing change set `gapSequence` is read from the history.
  private var gapDeadline: ContinuousClock.Instant?
  private var gapSequence: Int64 = 0
  /// The store's last sequence as read on the last rescan tick.
  var storeSequence: Int64 = 0
  /// What the last foreign-writer check saw.
  var lastSample: StoreSample?
  /// Durable only: change sets up to this one are replayed from the
  /// history at once, without waiting for files.
  private var replayThrough: Int64 = 0
  private var replayBuffer: [HistoryEntry] = []
  /// Durable only: the last sequence delivered, and acknowledged.
  private var lastDelivered: Int64 = 0
  private var lastAcknowledged: Int64 = 0
  /// Durable only: the place expired while the process was not running.
  private var expiry: ResetReason?

  /// Opens the sequencer of `store`. `fromStart`: deliver every change set
  /// the store has (a store created after the listener started), else
  /// start after its current sequence or a durable place.
  init(
    store: Store, listener: String, options: ListenerOptions, cursor: DurableCursor?, inbox: OwnedInbox,
    hostileActs: HostileActs, fromStart: Bool
  ) throws {
    self.store = store.name
    storeID = store.storeID
    self.listener = listener
    self.options = options
    self.cursor = cursor
    self.inbox = inbox
    self.hostileActs = hostileActs
    if let file = store.readOnlyFile {
      readOnlyFile = file
      reader = nil
      fileIdentity = file.identityNow
      try resumeReadOnly()
      return
    }
    readOnlyFile = nil
    let reader = try StoreReader(path: store.path)
    self.reader = reader
    let sequence = try reader.sequence()
    lastSample = sampleStore()
    startSequence = fromStart ? 0 : sequence
    storeSequence = sequence
    if let cursor { try resume(cursor, storeSequence: sequence) }
    nextSequence = startSequence + 1
    lastDelivered = startSequence
    lastAcknowledged = startSequence
    if fromStart && sequence > 0 { replayThrough = max(replayThrough, sequence) }
  }

  var isReadOnly: Bool { readOnlyFile != nil }

  // MARK: Durable places

  /// Finds a durable listener's place: everything after it up to the
  /// store's sequence is replayed from the history; a place the history
  /// no longer reaches is an expired reset.
  private func resume(_ cursor: DurableCursor, storeSequence: Int64) throws {
    let acknowledged: Int64?
    do {
      acknowledged = try cursor.read()
    } catch {
      expiry = .placeUnreadable(error: "\(error)")
      return
    }
    guard let acknowledged else {
      try cursor.write(startSequence)  // a new durable listener starts here
      return
    }
    let oldest = try reader!.oldestHistorySequence() ?? storeSequence + 1
    if acknowledged > storeSequence {
      expiry = .placeAhead(place: acknowledged, storeSequence: storeSequence)
    } else if acknowledged + 1 < oldest && acknowledged < storeSequence {
      expiry = .placeExpired(place: acknowledged, oldest: oldest)
    } else {
      startSequence = acknowledged
      replayThrough = storeSequence
    }
  }

  /// A durable listener's place in a read-only store is the file it last
  /// saw: a file replaced while the listener was not running is a reset.
  private func resumeReadOnly() throws {
    guard let cursor else { return }
    let seen = try? cursor.read()
    let now = fileIdentity.map(Self.fingerprint) ?? 0
    if let seen, seen != now {
      expiry = .readOnlyStoreReplacedWhileAway(store: store)
    }
    try cursor.write(now)
  }

  /// A file's identity as a place (non-negative, as cursors hold).
  private static func fingerprint(_ identity: FileIdentity) -> Int64 {
    var hasher = FNV1a()
    hasher.add(identity.device)
    hasher.add(identity.inode)
    return Int64(bitPattern: hasher.value & UInt64(Int64.max))
  }

  /// The previous event was handled: a durable listener's place moves on.
  func acknowledgeAutomatically() {
    guard let cursor, !isReadOnly, options.acknowledgement == .automatic, lastDelivered > lastAcknowledged else {
      return
    }
    do {
      try cursor.write(lastDelivered)
      lastAcknowledged = lastDelivered
    } catch {
      Logger.groupSync.error("listener '\(listener)': cannot record its place in store '\(store)': \(error)")
    }
  }

  /// The expired-place reset decided at start, once.
  func takeExpiry() -> Reset? {
    guard let reason = expiry else { return nil }
    expiry = nil
    let reset = reset(reason, removingInboxFiles: false)
    return Reset(reset.why, sequence: reset.sequence, isExpired: true, store: store, storeID: storeID)
  }

  // MARK: Delivery

  /// The next change set of a catch-up (a durable listener's, or a store
  /// found after the listener started), read from the history a page at a
  /// time; nil when there is none to replay.
  func replay() -> ListenerEvent? {
    guard let reader, nextSequence <= replayThrough else { return nil }
    if replayBuffer.first?.sequence != nextSequence {
      replayBuffer = (try? reader.historyEntries(after: nextSequence - 1, limit: 256)) ?? []
    }
    guard let entry = replayBuffer.first, entry.sequence == nextSequence else {
      return fromHistory(nextSequence)
    }
    replayBuffer.removeFirst()
    switch entry.changeSet {
    case .success(let changeSet): return .changes(accept(changeSet))
    case .failure(let error):
      return .reset(reset(.replayUnreadable(sequence: nextSequence, error: "\(error)")))
    }
  }

  func accept(_ changeSet: ChangeSet) -> ChangeSet {
    lastDelivered = changeSet.sequence
    nextSequence = changeSet.sequence + 1
    gapDeadline = nil
    return changeSet
  }

  /// What ``checkGap(laterInProcess:)`` found.
  enum GapCheck {
    /// No change set is missing, or its grace period runs.
    case nothingDue
    /// A change set is missing: its grace period started and lasts this
    /// long (the caller looks once more now, and wakes up when it ends).
    case graceStarted(Duration)
    /// The missing change set, read from the history, or the reset that
    /// says why it cannot be.
    case event(ListenerEvent)
  }

  /// A change set is missing while a later one waits, or while the store
  /// is ahead of what was delivered: give it the grace period to arrive,
  /// then read it from the history; what the history cannot give is a
  /// reset.
  func checkGap(laterInProcess: Bool) -> GapCheck {
    guard !isReadOnly else { return .nothingDue }
    let waiting = inboxSequences.contains { $0 > nextSequence } || moreBeyondWindow
      || storeSequence >= nextSequence || laterInProcess
    guard waiting else {
      gapDeadline = nil
      return .nothingDue
    }
    let now = ContinuousClock.now
    if gapDeadline == nil || gapSequence != nextSequence {
      // The grace period is the missing change set's own: it runs from its
      // commit, not from when this listener got to it, so that G change
      // sets lost together cost one grace period, not G in a row.
      gapSequence = nextSequence
      let deadline = now + graceLeft(for: nextSequence)
      gapDeadline = deadline
      if deadline > now { return .graceStarted(deadline - now) }
    }
    guard let deadline = gapDeadline, now >= deadline else { return .nothingDue }
    gapDeadline = nil
    return readFromHistory().map { .event($0) } ?? .nothingDue
  }

  /// The next change set, read from the history now (its file was bad),
  /// or the reset that says why it cannot be; nil when nothing is due.
  func readFromHistory() -> ListenerEvent? {
    fromHistory(nextSequence)
  }

  /// How much of the grace period change set `sequence` has left: the
  /// whole of it, less the time since its history row says it committed.
  /// A sequence the history does not hold (not committed, as a forged
  /// file claims, or purged) gets the whole period: `fromHistory` then
  /// says why it cannot be read.
  private func graceLeft(for sequence: Int64) -> Duration {
    let grace = options.gracePeriod
    guard let committedAt = try? reader?.committedAt(sequence) else { return grace }
    let age = Duration.nanoseconds(Store.nowNanoseconds() &- committedAt)
    // A clock set back makes a commit look younger: never wait past grace.
    return age >= grace ? .zero : (age < .zero ? grace : grace - age)
  }

  /// Change set `sequence`, read from the store's history, or the reset
  /// that says why it cannot be; nil when it is not due after all (it
  /// committed just now, or only forged files claimed it, again).
  private func fromHistory(_ sequence: Int64) -> ListenerEvent? {
    guard let reader else { return .reset(reset(.noHistory(store: store))) }
    do {
      guard let entry = try reader.historyEntry(sequence) else {
        let oldest = try reader.oldestHistorySequence()
        if let oldest, sequence < oldest {
          return .reset(reset(.historyPurged(sequence: sequence, oldest: oldest)))
        }
        storeSequence = try reader.sequence()
        // Committed between the two reads: the next look finds it.
        if sequence <= storeSequence { return nil }
        // Not committed: only forged files (or a forged in-process claim)
        // said it was. An act already answered is cleaned up quietly.
        let arrived = inboxArrivals { $0 > storeSequence }
        let continues = hostileActs.continues(arrived: arrived)
        Failpoint.stopOnce(if: Failpoint.stopAfterJudgingForgedFiles)
        guard continues else {
          return .reset(reset(.notInHistory(sequence: sequence), badInput: true))
        }
        Logger.groupSync.warning(
          "listener '\(listener)': files of '\(store)' beyond its sequence \(storeSequence) removed (forged, again)")
        hostileActs.noteArrived(removeInboxFiles { $0 > storeSequence })
        inboxSequences = inboxSequences.filter { $0 <= storeSequence }
        moreBeyondWindow = false
        return nil
      }
      switch entry.changeSet {
      case .success(let changeSet):
        Logger.groupSync.info("listener '\(listener)': change set \(sequence) of '\(store)' read from the history")
        return .changes(accept(changeSet))
      case .failure(let error):
        return .reset(reset(.historyEntryUnreadable(sequence: sequence, error: "\(error)")))
      }
    } catch {
      return .reset(reset(.historyUnreadable(sequence: sequence, error: "\(error)")))
    }
  }

  /// Logs why (unless the caller did), skips to the store's current
  /// sequence and drops everything up to it; with `removingInboxFiles`,
  /// also the store's files waiting in the inbox (false: the caller
  /// emptied the inbox, or the reset is decided before the first look).
  ///
  /// `badInput`: the reset answers an act of bad input; the files it
  /// removes arrived within that act (some may have come after the look
  /// that found it: a listener stopped in between), so their times
  /// continue it.
  func reset(
    _ reason: ResetReason, removingInboxFiles: Bool = true, logged: Bool = false, badInput: Bool = false
  ) -> Reset {
    if !logged { Logger.groupSync.error("listener '\(listener)': store '\(store)': \(reason); resetting") }
    // List before reading the sequence: a file appears only after its
    // commit, so every file listed now is at or below the sequence read
    // next (covered by the reset), or forged; all of them go.
    if removingInboxFiles {
      let removed = removeInboxFiles { _ in true }
      if badInput { hostileActs.noteArrived(removed) }
    }
    if let readOnlyFile {
      fileIdentity = readOnlyFile.identityNow
      if let cursor { try? cursor.write(fileIdentity.map(Self.fingerprint) ?? 0) }
      return Reset(reason, sequence: 0, store: store, storeID: storeID)
    }
    let sample = sampleStore()
    let sequence = sample?.sequence ?? nextSequence
    nextSequence = max(nextSequence, sequence + 1)
    storeSequence = nextSequence - 1
    lastDelivered = nextSequence - 1
    replayThrough = 0
    replayBuffer = []
    gapDeadline = nil
    lastSample = sample?.isUndecided == false ? sample : nil
    inboxSequences.removeAll()
    moreBeyondWindow = false
    return Reset(reason, sequence: nextSequence - 1, store: store, storeID: storeID)
  }
}

/// FNV-1a, 64 bits: a stable hash (Swift's `Hasher` is seeded per process).
struct FNV1a {
  private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325

  mutating func add(_ word: UInt64) {
    for shift in stride(from: 0, to: 64, by: 8) {
      value = (value ^ (word >> UInt64(shift) & 0xFF)) &* 0x100_0000_01b3
    }
  }
}
