// Row images held back here until what they need arrives (a parent row,
// a table or column after a migration), kept in the store.
import Foundation
import GRDB
import GroupSync

/// Row images the applier cannot store yet, because a reference in them
/// names a row this host does not have (`gs_relay_held` in the store):
/// a child whose parent comes later in the same batch, or in an entry not
/// applied yet, or held itself. They wait here, in the same transaction as
/// the applied place, and are applied as soon as the row they point at
/// arrives; a newer image of the same row replaces them. A reference is
/// never stored as a number that means another row.
///
/// `gs_relay_held(tbl, gid, pos, columns, data, reason, cause)`: the
/// image of position `pos`, its columns and values as the log has them
/// (JSON, the references as global IDs), and why it waits, in words and
/// as a ``RelayMetrics/HeldCause`` (which the metrics count by).
enum HeldRows {
  // Named in the core (``RelayTables``), whose capture ignores it.
  static let table = RelayTables.heldRows

  static func setUp(_ db: Database) throws {
    try db.execute(sql: """
      CREATE TABLE IF NOT EXISTS \(table) (
        tbl TEXT NOT NULL, gid TEXT NOT NULL, pos INTEGER NOT NULL, columns TEXT NOT NULL, data TEXT NOT NULL,
        reason TEXT NOT NULL, cause TEXT NOT NULL DEFAULT 'unknown', PRIMARY KEY (tbl, gid));
      """)
    // A store an earlier relay set up: the rows it held keep `unknown`.
    if try !db.columns(in: table).contains(where: { $0.name == "cause" }) {
      try db.execute(sql: "ALTER TABLE \(table) ADD COLUMN cause TEXT NOT NULL DEFAULT 'unknown'")
    }
  }

  struct Held: Sendable, Equatable {
    var table: String
    var image: RowImage
    var columns: [String]
    var position: Int64
    var reason: String
    var cause: RelayMetrics.HeldCause
  }

  /// Holds `image`; returns whether it was not held before (to tell once).
  @discardableResult
  static func hold(_ held: Held, _ db: Database) throws -> Bool {
    let before = try Int64.fetchOne(
      db.cachedStatement(sql: "SELECT pos FROM \(table) WHERE tbl = ? AND gid = ?"),
      arguments: [held.table, held.image.gid])
    let columns = String(decoding: try JSONEncoder().encode(held.columns), as: UTF8.self)
    let data = String(decoding: try JSONEncoder().encode(held.image.values ?? []), as: UTF8.self)
    try db.cachedStatement(sql: """
      INSERT INTO \(table)(tbl, gid, pos, columns, data, reason, cause) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(tbl, gid) DO UPDATE SET pos = excluded.pos, columns = excluded.columns, data = excluded.data,
        reason = excluded.reason, cause = excluded.cause
      """).execute(
        arguments: [held.table, held.image.gid, held.position, columns, data, held.reason, held.cause.rawValue])
    return before == nil
  }

  /// Replaces the image held for the row (its columns and values), keeping
  /// its position and reason.
  static func replaceImage(_ image: RowImage, table: String, columns: [String], _ db: Database) throws {
    let columns = String(decoding: try JSONEncoder().encode(columns), as: UTF8.self)
    let data = String(decoding: try JSONEncoder().encode(image.values ?? []), as: UTF8.self)
    try db.cachedStatement(sql: "UPDATE \(self.table) SET columns = ?, data = ? WHERE tbl = ? AND gid = ?")
      .execute(arguments: [columns, data, table, image.gid])
  }

  /// Sets the columns a later image of a held row changed (log format 2)
  /// in its held image, which takes that image's position; returns whether
  /// an image was held for the row.
  @discardableResult
  static func mergeChanges(_ image: RowImage, table: String, columns: [String], position: Int64, _ db: Database)
    throws -> Bool
  {
    guard let values = image.values,
      let row = try Row.fetchOne(
        db.cachedStatement(sql: "SELECT columns, data FROM \(self.table) WHERE tbl = ? AND gid = ?"),
        arguments: [table, image.gid])
    else { return false }
    var heldColumns = try JSONDecoder().decode([String].self, from: Data((row[0] as String).utf8))
    var heldValues = try JSONDecoder().decode([RowValue].self, from: Data((row[1] as String).utf8))
    for (column, value) in zip(columns, values) {
      if let index = heldColumns.firstIndex(where: { $0.lowercased() == column.lowercased() }) {
        heldValues[index] = value
      } else {
        heldColumns.append(column)
        heldValues.append(value)
      }
    }
    try db.cachedStatement(
      sql: "UPDATE \(self.table) SET columns = ?, data = ?, pos = max(pos, ?) WHERE tbl = ? AND gid = ?"
    ).execute(arguments: [
      String(decoding: try JSONEncoder().encode(heldColumns), as: UTF8.self),
      String(decoding: try JSONEncoder().encode(heldValues), as: UTF8.self), position, table, image.gid,
    ])
    return true
  }

  /// Forgets the held image of a row once an image of `position` or later
  /// comes for it (it supersedes what waited).
  static func release(_ db: Database, table: String, gid: String, through position: Int64) throws {
    try db.cachedStatement(sql: "DELETE FROM \(self.table) WHERE tbl = ? AND gid = ? AND pos <= ?")
      .execute(arguments: [table, gid, position])
  }

  /// Every held image, oldest first.
  static func all(_ db: Database) throws -> [Held] {
    try Row.fetchAll(
      db, sql: "SELECT tbl, gid, pos, columns, data, reason, cause FROM \(table) ORDER BY pos, tbl, gid")
      .map { row in
        let columns = try JSONDecoder().decode([String].self, from: Data((row[3] as String).utf8))
        let values = try JSONDecoder().decode([RowValue].self, from: Data((row[4] as String).utf8))
        let image = RowImage(gid: row[1], rowID: nil, base: 0, values: values, lost: nil)
        return Held(
          table: row[0], image: image, columns: columns, position: row[2], reason: row[5],
          cause: RelayMetrics.HeldCause(rawValue: row[6]) ?? .unknown)
      }
  }

  static func count(_ db: Database) throws -> Int64 {
    try Int64.fetchOne(db, sql: "SELECT count(*) FROM \(table)") ?? 0
  }

  /// The held images, counted by cause (a cause missing holds none).
  static func counts(_ db: Database) throws -> [RelayMetrics.HeldCause: Int64] {
    var counts: [RelayMetrics.HeldCause: Int64] = [:]
    for row in try Row.fetchAll(db, sql: "SELECT cause, count(*) FROM \(table) GROUP BY cause") {
      counts[RelayMetrics.HeldCause(rawValue: row[0]) ?? .unknown, default: 0] += row[1]
    }
    return counts
  }
}
