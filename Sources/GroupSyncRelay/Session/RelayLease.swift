// The identity under which this folder's relay of a host holds the host's
// lease on the server (the poll transport).
import Foundation

/// Who holds a host's lease on the server (`gs_peer.lease_holder`): one
/// identity per group folder and host, kept in `relays/HOST.lease` beside
/// the relay's lock file. Only the relay that holds `relays/HOST.lock`
/// reads or writes it, so a relay restarted on the folder is the one that
/// held the lease and takes it over at once, while a relay of the same
/// host name elsewhere waits for the lease to run out.
enum RelayLease {
  /// The folder's identity for `host`, made on first use.
  ///
  /// - Throws: GroupSync's and Foundation's errors writing the file.
  static func holder(group: String, host: String) throws -> UUID {
    let path = group + "/relays/" + host + ".lease"
    if let text = try? String(contentsOfFile: path, encoding: .utf8),
      let holder = UUID(uuidString: text.trimmingCharacters(in: .whitespacesAndNewlines))
    {
      return holder
    }
    let holder = UUID()
    try (holder.uuidString + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    return holder
  }
}
