import Foundation
import GRDB

/// A replicated row's identity across hosts. A relay (`GroupSyncRelay`)
/// gives each row it ships a global ID, the same on every host, and maps
/// it to the rowid the row has on each host (rowids and `INTEGER PRIMARY
/// KEY`s are each host's own). These lookups translate between the two,
/// so that a row can be named to another host (in a message, a URL, a
/// log) and found there. A store no relay ever ran on has no global IDs.
extension Store {
  /// The table a relay records the global IDs in, inside each replicated
  /// store.
  public static let globalIDTable = GlobalIDTable.name

  /// Whether a relay ever ran on this store (it has global IDs).
  public func hasGlobalIDs() throws -> Bool {
    try read { db in try db.tableExists(GlobalIDTable.name) }
  }

  /// The global ID of the row `id` names, in this store: a live row, or
  /// one deleted here (its former rowid still tells). nil for a row no
  /// relay shipped or applied yet.
  public func globalID(of id: ObjectID) throws -> String? {
    try globalIDs(of: [id])[id]
  }

  /// The global IDs of the rows `ids` name (those of this store a relay
  /// knows), in one read: for change sets, say.
  public func globalIDs(of ids: [ObjectID]) throws -> [ObjectID: String] {
    let ids = ids.filter { $0.storeID == storeID && !$0.isTemporary }
    guard !ids.isEmpty else { return [:] }
    return try read { db in
      guard try db.tableExists(GlobalIDTable.name) else { return [:] }
      var found: [ObjectID: String] = [:]
      for id in ids {
        if let gid = try GlobalIDTable.gid(db, table: id.table, rowID: id.rowID) { found[id] = gid }
      }
      return found
    }
  }

  /// The object ID of the row `globalID` names in `table` here, or nil
  /// when this host does not have that row (not arrived yet, or deleted).
  public func objectID(table: String, globalID: String) throws -> ObjectID? {
    try read { db in
      guard try db.tableExists(GlobalIDTable.name) else { return nil }
      let rowID = try GlobalIDTable.entry(db, table: table, gid: globalID)?.rowID
      return rowID.map { ObjectID(storeID: storeID, table: table, rowID: $0) }
    }
  }
}
