import Foundation

/// Where tests make their folders: stores, inboxes, hosts' group folders,
/// PostgreSQL data directories. `$TMPDIR` if set (the sanitizer passes of
/// `make test` point it at a folder on a tmpfs, in
/// `/dev/shm/groupsync-tests`: what they check is memory and threads, and
/// on this machine's disk a file's creation costs 0.1 ms of system time,
/// half of a test pass's CPU), else `/tmp`, the disk, where users' group
/// folders are.
public enum ScratchFolder {
  public static let root: String = {
    var root = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    if root.count > 1 && root.hasSuffix("/") { root.removeLast() }
    // A folder of its own (`/dev/shm/groupsync-tests`) may not exist yet;
    // the server's user must be able to pass through it.
    try? FileManager.default.createDirectory(
      atPath: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
    return root
  }()

  /// A new path under ``root``, `PREFIX-` and eight random characters: the
  /// caller makes it.
  public static func unique(_ prefix: String) -> String {
    "\(root)/\(prefix)-\(UUID().uuidString.prefix(8))"
  }
}
