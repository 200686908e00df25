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
  /// Another live process already listens under this name.
  case listenerNameInUse(String)
  /// The folder is not a group folder (it has no store).
  case notAGroupFolder(String)
  /// A system call failed.
  case system(call: String, path: String?, errno: Int32)
  /// The store's bookkeeping table is missing or holds nonsense.
  case invalidStore(path: String, reason: String)

  public var description: String {
    switch self {
    case .invalidURI(let uri, let reason):
      return "invalid GroupSync URI '\(uri)': \(reason)"
    case .invalidChangeSet(let file, let reason):
      return "invalid change-set file '\(file)': \(reason)"
    case .invalidListenerName(let name):
      return "invalid listener name '\(name)': use 1-64 letters, digits, '-', '_' or '.', not starting with '.'"
    case .listenerNameInUse(let name):
      return "listener name '\(name)' is in use by a live listener"
    case .notAGroupFolder(let path):
      return "'\(path)' is not a group folder (no store.sqlite; run 'groupsync init' first)"
    case .system(let call, let path, let code):
      let detail = String(cString: strerror(code))
      if let path { return "\(call)(\(path)) failed: \(detail)" }
      return "\(call) failed: \(detail)"
    case .invalidStore(let path, let reason):
      return "invalid store '\(path)': \(reason)"
    }
  }
}
