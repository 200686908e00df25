// The store's change sets waiting in the inbox: which ones, and reading
// the next one.
import Foundation

extension StoreSequencer {
  /// Removes the store's files in the inbox whose sequence `matches`;
  /// returns when they arrived (their change times, ns since 1970; nil
  /// when none was removed).
  @discardableResult
  func removeInboxFiles(where matches: (Int64) -> Bool) -> ClosedRange<Int64>? {
    var arrivals = ArrivalRange()
    let folder = inbox.folder
    try? folder.forEachEntry { name in
      if let (fileStore, sequence) = GroupLayout.storeAndSequence(inFileNameBuffer: name), fileStore == store,
        matches(sequence)
      {
        arrivals.add(folder.changeTime(name))
        folder.remove(name)
      }
    }
    return arrivals.range
  }

  /// When this store's inbox files that `matches` arrived (their change
  /// times, ns since 1970); nil when there are none.
  func inboxArrivals(where matches: (Int64) -> Bool) -> ClosedRange<Int64>? {
    var arrivals = ArrivalRange()
    let folder = inbox.folder
    try? folder.forEachEntry { name in
      if let (fileStore, sequence) = GroupLayout.storeAndSequence(inFileNameBuffer: name), fileStore == store,
        matches(sequence)
      {
        arrivals.add(folder.changeTime(name))
      }
    }
    return arrivals.range
  }

  /// Notes a change set found in the inbox.
  func track(_ sequence: Int64) {
    if sequence < nextSequence { return }
    if sequence < nextSequence + Self.window {
      inboxSequences.insert(sequence)
    } else {
      moreBeyondWindow = true
    }
  }

  /// Forgets what the inbox held, before a new listing.
  func forgetInbox() {
    inboxSequences.removeAll()
    moreBeyondWindow = false
  }

  /// Whether the window ran dry while more waits beyond it.
  var needsRefill: Bool { inboxSequences.isEmpty && moreBeyondWindow }

  /// Whether the next change set is in the inbox.
  var nextIsInInbox: Bool { inboxSequences.contains(nextSequence) }

  enum ReadResult {
    case success(ChangeSet)
    /// Why the file cannot be delivered, and when it arrived (its change
    /// time, ns since 1970; nil: it could not be opened).
    case failure(ResetReason, arrived: Int64?)
  }

  /// Reads, checks and removes the next change set's file. nil if it is gone.
  func readNextInboxFile() -> ReadResult? {
    let folder = inbox.folder
    let sequence = nextSequence
    let fileName = GroupLayout.fileName(store: store, sequence: sequence)
    inboxSequences.remove(sequence)
    defer { folder.remove(fileName) }
    let file: FileDescriptor
    let info: stat
    do {
      // No symlink followed, no FIFO waited on, nothing but a regular file.
      (file, info) = try folder.openRegularFile(fileName, O_RDONLY)
    } catch GroupSyncError.system(ENOENT) {
      return nil
    } catch {
      return .failure(.fileUnopenable(file: fileName, error: "\(error)"), arrived: nil)
    }
    let arrived = info.changeTimeNanoseconds
    let changeSet: ChangeSet
    do {
      guard info.st_size <= options.maximumFileSize else {
        return .failure(.fileTooLarge(file: fileName, size: Int64(info.st_size), maximum: options.maximumFileSize), arrived: arrived)
      }
      let bytes = try System.readAll(file.rawValue, size: Int(info.st_size), path: folder.path + "/" + fileName)
      changeSet = try ChangeSetEncoding.decode(bytes, name: fileName)
    } catch {
      return .failure(.fileUnreadable(file: fileName, error: "\(error)"), arrived: arrived)
    }
    guard changeSet.storeID == storeID else {
      return .failure(.fileOfAnotherStore(file: fileName, storeID: changeSet.storeID, expected: storeID), arrived: arrived)
    }
    guard changeSet.sequence == sequence else {
      return .failure(.fileSequenceMismatch(file: fileName, sequence: changeSet.sequence), arrived: arrived)
    }
    if let unknown = reader?.unknownTable(in: changeSet) {
      return .failure(.fileUnknownTable(file: fileName, table: "\(unknown)"), arrived: arrived)
    }
    return .success(changeSet)
  }
}
