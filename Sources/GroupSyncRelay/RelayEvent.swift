import Foundation

/// What a relay did, in order, as ``Relay/events`` delivers it.
public enum RelayEvent: Sendable, Equatable, Codable {
  /// Connected to PostgreSQL, took the host's lock, caught up its places.
  case connected(host: String)
  /// The connection is down or could not be made; the relay retries.
  case disconnected(reason: String)
  /// Local change sets up to `localSequence` went to the log as entry
  /// `position` (`changeSets` of them, `rows` row images).
  case shipped(store: String, position: Int64, localSequence: Int64, changeSets: Int, rows: Int)
  /// Log entries up to `position` were applied in one local transaction,
  /// which committed as local sequence `localSequence` (nil when no row
  /// changed here).
  case applied(store: String, position: Int64, entries: Int, rows: Int, localSequence: Int64?)
  /// Two hosts wrote the same row concurrently; one won.
  case conflict(ConflictRecord)
  /// This host's place was purged from the log (or the log started over):
  /// the store was re-synchronised from the rows' current images.
  case resync(store: String, position: Int64, rows: Int, reason: String)
  /// Something failed; the relay goes on (retrying what failed).
  case error(String)
}
