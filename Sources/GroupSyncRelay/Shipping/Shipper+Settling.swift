// Settling a shipment's images against the rows' current images in the
// log: merged by property (or whole rows), conflicts recorded.
import Foundation
import GRDB
import GroupSync

extension Shipper {
  /// Settles one table's images against the rows' current images in
  /// `gs_row` (locked), collects the winners to record there, and returns
  /// the images every host is to apply. Conflicts get the entry's position
  /// once the server has assigned it.
  ///
  /// A row that moved on in the log since the image this host wrote on is
  /// merged with it by property (log format 2, ``PropertyMerge``), or, in
  /// format 1, settled whole by the policy. The settled row ships whole; the
  /// origin applies it too where it differs from what it wrote (`lost`).
  func settle(
    _ table: TableImage, plan: Plan, current: [RowKey: SharedLog.CurrentRow], conflicts: inout [ConflictRecord],
    winners: inout [SharedLog.Winner], caughtUp: inout [CaughtUp]
  ) throws -> TableImage {
    let context = self.context
    let columnsJSON = LogJSON.columns(table.columns)
    let format = context.writeFormat
    var resolved = table
    resolved.rows = []
    for image in table.rows {
      let key = RowKey(table: table.name, gid: image.gid)
      guard let now = current[key], now.position > image.base else {
        resolved.rows.append(format.mergesByProperty && !table.isSnapshot ? changes(image, of: table, plan: plan) : image)
        winners.append(
          SharedLog.Winner(
            table: table.name, gid: image.gid, base: image.base, columns: columnsJSON,
            data: try image.values.map { try StoredImage.encode($0, format: format) }))
        continue
      }
      // The row moved on in the log since the image this host wrote on.
      // In this shipment's column order: hosts may list the same columns
      // in another order (a column added later by ALTER TABLE).
      let theirs = try now.data.map {
        try Self.values(
          try StoredImage.decode($0, formats: context.version.reads, store: context.storeName, position: now.position),
          columns: now.columns, as: table.columns, else: image.values)
      }
      if theirs == image.values && now.columns == columnsJSON {
        // The same values: no conflict, and nothing to ship. This host
        // holds the log's image of the row as of its position, so that no
        // older entry is applied over it (a partial one to a row both
        // deleted, say).
        caughtUp.append(
          CaughtUp(table: table.name, gid: image.gid, position: now.position, values: theirs, columns: table.columns))
        continue
      }
      if table.isSnapshot {
        // A table shipped whole carries every row, changed or not: an
        // older image of it never overwrites a newer one, and this host,
        // which held the newer one back meanwhile, takes it from here.
        resolved.rows.append(
          RowImage(gid: image.gid, rowID: image.rowID, base: now.position, values: theirs, lost: true))
        continue
      }
      let merge = PropertyMerge(
        store: context.storeName, table: table.name, gid: image.gid, columns: table.columns, ourHost: context.host,
        theirHost: now.host, rules: context.merge)
      var result: PropertyMerge.Result
      if format.mergesByProperty {
        result = merge.merge(base: plan.bases[key]?.values, ours: image.values, theirs: theirs)
        if let merged = result.values, merged != image.values, merged != theirs,
          let refusal = try MergeCheck.refusal(merged, columns: table.columns, table: table.name, context: context)
        {
          result = merge.wholeRow(
            ours: image.values, theirs: theirs, reason: "the merged row breaks a constraint of \(table.name): \(refusal)")
        }
      } else {
        // Format 1: relays that do not merge by property read the log.
        result = merge.wholeRow(ours: image.values, theirs: theirs, reason: nil)
      }
      conflicts += result.conflicts
      // Every host applies the settled row, this one where it differs from
      // what it wrote; the log's current image changes unless it stays.
      let ours = result.values == image.values
      resolved.rows.append(
        RowImage(
          gid: image.gid, rowID: image.rowID, base: ours ? image.base : now.position, values: result.values,
          lost: ours ? nil : true))
      if result.values != theirs {
        winners.append(
          SharedLog.Winner(
            table: table.name, gid: image.gid, base: image.base, columns: columnsJSON,
            data: try result.values.map { try StoredImage.encode($0, format: format) }))
      }
    }
    return resolved
  }
}
