// The errors GroupSync throws, each named for what happened.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An error GroupSync throws. Each case names what was wrong.
public enum GroupSyncError: Error, Equatable, Sendable, CustomStringConvertible {
  /// A string is not a GroupSync object or table URI.
  case invalidURI(String, reason: String)
  /// A change-set file cannot be read: corrupt, truncated, foreign or hostile.
  case invalidChangeSet(file: String, reason: String)
  /// A listener name is empty, too long, or has characters other than
  /// letters, digits, `-`, `_` and `.`.
  case invalidListenerName(String)
  /// A durable listener was asked for without a name: its place is kept
  /// under its name, to be found by the next process that listens under it.
  case durableListenerNeedsName
  /// Another live process already listens under this name.
  case listenerNameInUse(String)
  /// A durable listener's call (`acknowledge`) on a listener that is not
  /// durable: it keeps no place to move.
  case listenerNotDurable(String)
  /// A durable listener acknowledged the way the other kind keeps its
  /// place: `acknowledge(_:)` for a place kept in the store
  /// (``Acknowledgement/inStore``), or `acknowledge(_:in:)` for one kept
  /// in the cursor file.
  case acknowledgementOfOtherKind(listener: String, placeKeptInStore: Bool)
  /// The folder is not a group folder (it has no store).
  case notAGroupFolder(String)
  /// A system call failed.
  case system(SystemCallError)
  /// The store's bookkeeping table is missing or holds nonsense.
  case invalidStore(path: String, reason: String)
  /// The store was closed.
  case storeClosed(path: String)
  /// A transaction changed rows without getting a sequence number: it was
  /// written with GRDB directly (`pool.write`, a raw COMMIT) instead of
  /// `Store.write`, so no listener would have been told. It rolled back.
  case unsequencedCommit
  /// `Store.write` was called inside a transaction of the same store.
  case nestedWrite
  /// The write closure committed or rolled back the transaction itself.
  case transactionEndedByClosure
  /// Memory ran out while capturing the transaction's rows; it rolled back.
  case captureOutOfMemory
  /// Row capture cannot work on this connection.
  case captureUnavailable(reason: String)
  /// A group-defaults key, suite or value is not acceptable (too large,
  /// empty, not the type asked for).
  case invalidDefaultsValue(reason: String)
  /// An entry of the group folder is not what it must be (a symlink, a
  /// FIFO, a file where a folder belongs, another device): it was refused,
  /// not followed.
  case unsafeEntry(path: String, reason: String)
  /// A notification's name or payload is not acceptable.
  case invalidNotification(reason: String)
  /// A note was added outside `Store.write`.
  case noteOutsideWrite
  /// A store name is empty, too long, or has characters other than
  /// lowercase letters, digits, `-` and `_`.
  case invalidStoreName(String)
  /// The group has no store of this name.
  case unknownStore(String)
  /// An object or table ID names a store UUID the group does not have.
  case unknownStoreID(UUID)
  /// A write to a read-only store: it changes only by being replaced as a
  /// whole.
  case readOnlyStore(String)
  /// A store of this name exists with the other kind (read-only or
  /// writable).
  case storeKindMismatch(String, isReadOnly: Bool)

  /// A failure of the system call `call` on `path` with `errno`.
  public static func system(call: String, path: String?, errno: Int32) -> GroupSyncError {
    .system(SystemCallError(call: call, path: path, errno: errno))
  }

  public var description: String {
    switch self {
    case .invalidURI(let uri, let reason):
      return "invalid GroupSync URI '\(uri)': \(reason)"
    case .invalidChangeSet(let file, let reason):
      return "invalid change-set file '\(file)': \(reason)"
    case .invalidListenerName(let name):
      return "invalid listener name '\(name)': use 1-64 letters, digits, '-', '_' or '.', not starting with '.'"
    case .durableListenerNeedsName:
      return "a durable listener needs a name: its place is kept under it (listen(as: name, durable: true))"
    case .listenerNameInUse(let name):
      return "listener name '\(name)' is in use by a live listener"
    case .listenerNotDurable(let name):
      return "listener '\(name)' is not durable: it keeps no place to acknowledge (listen with durable: true)"
    case .acknowledgementOfOtherKind(let name, true):
      return "listener '\(name)' keeps its place in the store: acknowledge inside store.write with acknowledge(_:in:)"
    case .acknowledgementOfOtherKind(let name, false):
      return "listener '\(name)' keeps its place in its cursor file: acknowledge with acknowledge(_:)"
    case .notAGroupFolder(let path):
      return "'\(path)' is not a group folder (no store.sqlite; run 'groupsync init' first)"
    case .system(let error):
      return error.description
    case .invalidStore(let path, let reason):
      return "invalid store '\(path)': \(reason)"
    case .storeClosed(let path):
      return "the store '\(path)' is closed"
    case .unsequencedCommit:
      return "refused to commit changed rows without a sequence number: write through Store.write "
        + "(not DatabasePool.write or a raw COMMIT) so that listeners are told; the transaction was rolled back"
    case .nestedWrite:
      return "Store.write was called inside a transaction of the same store; nest savepoints with db.inSavepoint instead"
    case .transactionEndedByClosure:
      return "the write closure committed or rolled back the transaction itself; let Store.write end it"
    case .captureOutOfMemory:
      return "out of memory while capturing changed rows; the transaction was rolled back"
    case .captureUnavailable(let reason):
      return "row capture unavailable: \(reason)"
    case .invalidDefaultsValue(let reason):
      return "invalid group defaults value: \(reason)"
    case .unsafeEntry(let path, let reason):
      return "refused '\(path)': \(reason)"
    case .invalidNotification(let reason):
      return "invalid notification: \(reason)"
    case .noteOutsideWrite:
      return "notes (defaults changes, notifications) can only be added inside Store.write"
    case .invalidStoreName(let name):
      return "invalid store name '\(name)': use 1-32 lowercase letters, digits, '-' or '_', starting with a letter or digit"
    case .unknownStore(let name):
      return "the group has no store named '\(name)'"
    case .unknownStoreID(let id):
      return "the group has no store with UUID \(id.uuidString)"
    case .readOnlyStore(let name):
      return "the store '\(name)' is read-only: it changes only by being replaced as a whole (installReadOnlyStore, or groupsync init --store NAME --read-only FILE)"
    case .storeKindMismatch(let name, let isReadOnly):
      return "the store '\(name)' exists and is \(isReadOnly ? "read-only" : "writable")"
    }
  }
}
