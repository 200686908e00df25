import Foundation
import GRDB
import GroupSync

/// A replicated row's identity across hosts: its global ID is the same on
/// every host, its rowid (and `INTEGER PRIMARY KEY`) is each host's own.
/// These lookups translate between the two on this host, so an
/// application can name a row to another host (or in a message, a URL, a
/// log) by its global ID and find it there.
extension Store {
  /// The global ID of row `rowID` of `table` here (nil: a row the relay
  /// has not shipped or applied yet, or none).
  public func globalID(table: String, rowID: Int64) throws -> String? {
    try read { db in
      guard try db.tableExists(RowIdentityMap.rowTable) else { return nil }
      return try RowIdentityMap.entry(db, table: table, rowID: rowID)?.gid
    }
  }

  /// This host's rowid of the row `globalID` names in `table` (nil: a row
  /// this host does not have, or has deleted).
  public func rowID(table: String, globalID: String) throws -> Int64? {
    try read { db in
      guard try db.tableExists(RowIdentityMap.rowTable) else { return nil }
      return try RowIdentityMap.entry(db, table: table, gid: globalID)?.rowID
    }
  }
}
