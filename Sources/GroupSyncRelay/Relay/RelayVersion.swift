// A relay's version: the log formats it reads and writes, and the
// server schema it speaks.
import Foundation

/// This relay's version, and the log formats and server schema it speaks.
///
/// Two adjacent versions run side by side: each announces the formats it
/// reads when it connects, and the group writes the newest format every
/// member reads (see ``LogFormat``).
public struct RelayVersion: Sendable, Equatable, Codable {
  /// The version's name, as `groupsync-relay --version` prints it.
  public var name: String
  /// The formats it applies; an entry of any other it holds.
  public var reads: [LogFormat]
  /// The newest format it writes (when the group has moved up to it).
  public var newestWritten: LogFormat
  /// The version of the server's objects it makes and needs (the
  /// server's `gs_schema`).
  public var serverSchema: Int

  /// This build: relay 5 reads and writes as relay 4 did, and writes the
  /// log's shared state only through the server's checked functions
  /// (server schema 5); relay 4 wakes the
  /// group on its own channel (server schema 4); relay 3 reads formats 1
  /// and 2 and writes format 2 (merging by property) once every member
  /// reads it; relay 2 reads and writes format 1 and announces it; relay 1
  /// (every relay from before formats were versioned) announced nothing,
  /// and reads format 1 only. A member's version number also says which
  /// channel it listens on (below 4: the legacy one, `gs_changes`).
  public static let current = RelayVersion(
    name: "5", reads: [.v1, .v2], newestWritten: .newest, serverSchema: SharedSchema.version)

  /// This build speaking the testing format too (see ``LogFormat/testing``).
  public static let testing = RelayVersion(
    name: current.name + "+testing", reads: current.reads + [.testing], newestWritten: .testing,
    serverSchema: SharedSchema.version)

  /// The format this relay writes while the group's format is `group`:
  /// the newest it both reads and writes that the group has reached (a
  /// relay rolled back below the group's format writes its own newest,
  /// which the adjacent version still reads).
  func writes(groupFormat group: LogFormat) -> LogFormat {
    reads.filter { $0 <= min(group, newestWritten) }.max() ?? reads.min() ?? .v1
  }

  /// `"2 (log formats: reads 1, writes up to 1; server schema 2)"`.
  public var description: String {
    let read = reads.map { String($0.rawValue) }.joined(separator: ", ")
    return "\(name) (log formats: reads \(read), writes up to \(newestWritten.rawValue); server schema \(serverSchema))"
  }
}
