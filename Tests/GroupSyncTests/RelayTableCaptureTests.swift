// The relay's own tables in a replicated store, as the capture of any
// process that opens the store sees them.
import Foundation
import GRDB
import GroupSyncTestSupport
import Testing

@testable import GroupSync

/// A relay keeps its bookkeeping in tables of each replicated store
/// (`gs_relay_*`). Every process's capture leaves them out, whoever opens
/// the store: a commit that writes only them is quiet (no change set, no
/// history row, counted so that no listener takes it for a foreign
/// writer), and a commit that writes a user's rows beside them reports
/// only those. On both hooks.
@Suite(.timed) struct RelayTableCaptureTests {
  /// The relay's tables, as a relay makes them (their names are what
  /// counts here).
  static let relaySchema = """
    CREATE TABLE gs_relay_state(grp TEXT NOT NULL, host TEXT NOT NULL, shipped INTEGER NOT NULL,
      applied INTEGER NOT NULL, PRIMARY KEY (grp, host));
    CREATE TABLE gs_relay_held(tbl TEXT NOT NULL, gid TEXT NOT NULL, pos INTEGER NOT NULL, data TEXT,
      PRIMARY KEY (tbl, gid));
    CREATE TABLE gs_relay_extra(tbl TEXT NOT NULL, gid TEXT NOT NULL, col TEXT NOT NULL, pos INTEGER NOT NULL,
      value TEXT, PRIMARY KEY (tbl, gid, col));
    CREATE TABLE gs_relay_columns(tbl TEXT NOT NULL, col TEXT NOT NULL, PRIMARY KEY (tbl, col));
    """
  static let author = "groupsync-relay@a"

  /// A group whose store has a user table and the relay's tables, and a
  /// listener on it.
  func makeGroup(_ folder: TemporaryFolder, forceUpdateHook: Bool) throws -> (GroupFolder, Listener) {
    var options = StoreOptions()
    options.captureWithoutPreUpdateHook = forceUpdateHook
    let group = try GroupFolder(path: folder.child("group"), options: options)
    try group.store.write { db in
      try db.execute(sql: ListenerFixture.schema + Self.relaySchema)
      try GlobalIDTable.setUp(db)
    }
    return (group, try group.listen(as: "live", options: ListenerFixture.options))
  }

  /// Writes a row into each of the relay's tables.
  static func writeRelayRows(_ db: Database, rowID: Int64, position: Int64) throws {
    try GlobalIDTable.set(.init(gid: "gid-\(rowID)", rowID: rowID, position: position), db, table: "items")
    for sql in [
      """
      INSERT INTO gs_relay_state(grp, host, shipped, applied) VALUES ('app', 'a', ?1, ?1)
      ON CONFLICT(grp, host) DO UPDATE SET shipped = excluded.shipped, applied = excluded.applied
      """,
      "INSERT OR REPLACE INTO gs_relay_held(tbl, gid, pos, data) VALUES ('items', 'held', ?1, '[]')",
      "INSERT OR REPLACE INTO gs_relay_extra(tbl, gid, col, pos, value) VALUES ('items', 'held', 'c', ?1, '1')",
      "INSERT OR IGNORE INTO gs_relay_columns(tbl, col) VALUES ('items', 'body' || ?1)",
    ] {
      try db.execute(sql: sql, arguments: [position])
    }
  }

  @Test(arguments: [false, true])
  func aCommitOfOnlyTheRelaysTablesIsQuiet(forceUpdateHook: Bool) async throws {
    let folder = try TemporaryFolder()
    let (group, listener) = try makeGroup(folder, forceUpdateHook: forceUpdateHook)
    defer { listener.close() }
    let store = group.store
    let sequence = try store.currentSequence()
    let quiet = try await store.read { try StoreState.quietCommits($0) }

    let changeSet = try await store.writeAndReturnChangeSet(author: Self.author) { db in
      try Self.writeRelayRows(db, rowID: 1, position: 1)
    }.changeSet
    #expect(changeSet == nil, "a commit of the relay's tables alone: \(String(describing: changeSet))")
    #expect(try store.currentSequence() == sequence, "no history row")
    #expect(try await store.read { try StoreState.quietCommits($0) } == quiet + 1, "counted as a quiet commit")
    // No listener is told anything: neither a change set nor a reset
    // (several of its store checks pass meanwhile).
    let told = await ListenerHarness.next(listener, timeout: .milliseconds(1_000))
    #expect(told == nil, "\(String(describing: told))")
  }

  @Test(arguments: [false, true])
  func aCommitOfUserRowsBesideTheRelaysTablesReportsOnlyTheUserRows(forceUpdateHook: Bool) async throws {
    let folder = try TemporaryFolder()
    let (group, listener) = try makeGroup(folder, forceUpdateHook: forceUpdateHook)
    defer { listener.close() }
    let store = group.store
    let changeSet = try #require(
      try await store.writeAndReturnChangeSet(author: Self.author) { db in
        try db.execute(sql: "INSERT INTO items(id, body) VALUES (7, 'applied')")
        try Self.writeRelayRows(db, rowID: 7, position: 3)
      }.changeSet)
    let items = Set([ObjectID(storeID: store.storeID, table: "items", rowID: 7)])
    #expect(changeSet.tables.keys.map(\.name) == ["items"], "\(changeSet)")
    #expect(changeSet.inserted == items && changeSet.updated.isEmpty && changeSet.deleted.isEmpty)
    #expect(changeSet.invalidatedTables.isEmpty)
    let delivered = try await ListenerHarness.nextChanges(listener)
    #expect(delivered.sequence == changeSet.sequence && delivered.tables.keys.map(\.name) == ["items"])
    // And an update of both: the user's row alone again.
    let updated = try #require(
      try await store.writeAndReturnChangeSet(author: Self.author) { db in
        try db.execute(sql: "UPDATE items SET body = 'again' WHERE id = 7")
        try Self.writeRelayRows(db, rowID: 7, position: 4)
      }.changeSet)
    #expect(updated.updated == items && updated.inserted.isEmpty && updated.tables.count == 1, "\(updated)")
  }
}
