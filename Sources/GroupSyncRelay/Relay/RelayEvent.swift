// What a relay tells, in order, through `events` and `onEvent`.
import Foundation

/// What a relay did, in order, as ``Relay/events`` delivers it.
public enum RelayEvent: Sendable, Equatable, Codable {
  /// Connected to PostgreSQL, took the host's lock, caught up its places.
  case connected(host: String)
  /// The connection is down or could not be made; the relay retries.
  case disconnected(reason: String)
  /// Local change sets up to `localSequence` went to the log as entry
  /// `position` (`changeSets` of them, `rows` row images, a body of
  /// `bytes`).
  case shipped(store: String, position: Int64, localSequence: Int64, changeSets: Int, rows: Int, bytes: Int)
  /// Log entries up to `position` were applied in one local transaction,
  /// which committed as local sequence `localSequence` (nil when no row
  /// of the user's changed here: the relay's own tables, a held row say,
  /// commit no change set).
  case applied(store: String, position: Int64, entries: Int, rows: Int, localSequence: Int64?)
  /// Two hosts wrote the same row concurrently; one won.
  case conflict(ConflictRecord)
  /// This host's place was purged from the log (or the log started over):
  /// the store was re-synchronised from the rows' current images.
  case resync(store: String, position: Int64, rows: Int, reason: String)
  /// A row image waits: a reference in it names a row this host does not
  /// have yet (told once per row; applied as soon as that row arrives).
  case held(store: String, table: String, gid: String, reason: String)
  /// When the relay starts, per store: the tables whose integer keys are
  /// each host's own (rowids), the columns translated as references to
  /// them, and integer columns named like references that are none (an
  /// `*_id` column no foreign key declares: declare it, or it travels as
  /// a number that means another row on other hosts).
  case identities(store: String, localKeys: [String], references: [String], suspects: [String])
  /// The group's log format, as this relay learned it (when it connects,
  /// and when the group moves up), and the format it writes meanwhile.
  case format(group: Int, writing: Int)
  /// The store holds at entry `position`: it is in format `format`, which
  /// this relay does not read (a newer relay wrote it); `readers` names
  /// the relay versions that do. Nothing after it is applied or shipped
  /// until this host's relay is upgraded; nothing is skipped.
  case formatHeld(store: String, position: Int64, format: Int, readers: String)
  /// Other members of the group announce merge rules other than this
  /// relay's (`ours`; `differing` by host): it ships nothing until they
  /// agree, rather than settle conflicts in two ways (applying goes on).
  /// Told when the disagreement starts or changes, and with an empty
  /// `differing` when the members agree again.
  case mergeRules(ours: String, differing: [String: String])
  /// Something failed; the relay goes on (retrying what failed).
  case error(String)
  /// The relay gave up and its thread ended: only an administrator can
  /// cure `reason` (a missing table, grant or membership; see
  /// ``RelayError/sharedTablesUnavailable(role:problem:)``). The last
  /// event; ``Relay/failure`` holds the error.
  case failed(reason: String)
}
