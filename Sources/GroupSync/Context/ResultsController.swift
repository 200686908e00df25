import Foundation
import GRDB

/// A live, ordered list of the rows a ``FetchRequest`` selects in its
/// store, kept current by its context's merges and saves: Core Data's
/// fetched results controller. It follows only its store's change sets and
/// resets.
///
/// For a change set it checks only the changed rowids against the request
/// (one query) and reports a ``ResultsChange``: a `CollectionDifference`
/// with moves, and the IDs updated in place. It re-runs the whole request
/// only when it must: the table was invalidated, the context reset, the
/// filter reads another table that changed, or the request has a limit.
///
/// ```swift
/// let controller = try ResultsController(context: context,
///   request: FetchRequest(table: "note", filter: "done = 0", orderBy: [.ascending("body")]))
/// controller.onChange { change in
///   rows = rows.applying(change.difference)!   // animate instead of reloading
/// }
/// ```
public final class ResultsController {
  /// The request whose results the controller keeps current.
  public let request: FetchRequest
  /// The context whose merges and saves it follows.
  public let context: Context
  /// The store of the group the request reads.
  let store: Store
  /// The request's table as the schema spells it (change sets do).
  private var table: TableName
  /// The rowids in order, their sort keys alongside.
  private var rowIDs: [Int64] = []
  private var keys: [[DatabaseValue]] = []
  private var keysByRowID: [Int64: [DatabaseValue]] = [:]
  /// Tables other than the request's that its filter reads.
  private var otherTables: Set<TableName> = []
  private var observers: [(ResultsChange) -> Void] = []
  private var continuations: [UUID: AsyncStream<ResultsChange>.Continuation] = [:]
  private let order: KeyOrder

  /// Runs the request once and registers its objects in `context`.
  ///
  /// - Throws: ``GroupSyncError/unknownStore(_:)`` if the group has no
  ///   store named `request.store`; ``ContextError/invalidRequest(_:)``.
  public init(context: Context, request: FetchRequest) throws {
    self.context = context
    self.request = request
    self.store = try context.store(named: request.store)
    self.order = KeyOrder(request.sortDescriptors)
    self.table = TableName(request.table)
    try performFetch(notify: false)
    context.addController(self)
  }

  deinit {
    for continuation in continuations.values { continuation.finish() }
  }

  /// The number of rows.
  public var count: Int { rowIDs.count }

  /// The IDs of the rows, in order.
  public var objectIDs: [ObjectID] { rowIDs.map(objectID) }

  /// The ID of the row at `index`.
  public func objectID(at index: Int) -> ObjectID { objectID(rowIDs[index]) }

  /// The row at `index`, registered in the context.
  public func object(at index: Int) throws -> ManagedObject { try context.object(with: objectID(at: index)) }

  /// Calls `body` after each change of the list.
  public func onChange(_ body: @escaping (ResultsChange) -> Void) {
    observers.append(body)
  }

  /// Each change of the list from now on.
  public var changes: AsyncStream<ResultsChange> {
    let (stream, continuation) = AsyncStream.makeStream(of: ResultsChange.self)
    continuations[UUID()] = continuation
    return stream
  }

  /// Re-runs the whole request; `notify`: report the difference.
  /// Why the request could not run when the list was last brought up to
  /// date after a reset or an invalidated table: its table or a column is
  /// gone (a read-only store replaced by a file without them, a table
  /// dropped). The list is empty meanwhile and the next reset or change of
  /// the table tries again; merges go on.
  public private(set) var error: (any Error)?

  /// Runs the request again after a reset or an invalidated table: a
  /// request that no longer runs empties the list and is kept in `error`
  /// instead of ending the caller's merge.
  func refetch() throws {
    do {
      try performFetch(notify: true)
      error = nil
    } catch let failure where Self.isSchemaError(failure) {
      error = failure
      let old = rowIDs
      rowIDs = []
      keys = []
      keysByRowID = [:]
      report(from: old, changed: [])
    }
  }

  /// A table or column the request needs is missing.
  private static func isSchemaError(_ error: any Error) -> Bool {
    switch error {
    case ContextError.invalidRequest: true
    case let error as DatabaseError: error.resultCode == .SQLITE_ERROR
    default: false
    }
  }

  func performFetch(notify: Bool) throws {
    let tables = context.tables(store)
    let (rows, others, table) = try store.read { db in
      let table = TableName(try tables.info(TableName(request.table), db).name)
      let others = try request.readTables(db, tables: tables).subtracting([table])
      return (try request.fetchRows(db, tables: tables), others, table)
    }
    otherTables = others
    self.table = table
    let old = rowIDs
    rowIDs = rows.map(\.rowID)
    keys = rows.map(\.keys)
    keysByRowID = Dictionary(rows.map { ($0.rowID, $0.keys) }, uniquingKeysWith: { a, _ in a })
    for row in rows {
      context.register(rowID: row.rowID, table: table.name, storeID: store.storeID, values: row.values)
    }
    if notify { report(from: old, changed: Set(rowIDs)) }
  }

  /// Brings the list up to date with a merged or saved change set.
  func apply(_ changeSet: ChangeSet) throws {
    guard changeSet.storeID == store.storeID else { return }
    let touched = changeSet.tables[table]
    let othersChanged = otherTables.contains { changeSet.tables[$0] != nil || changeSet.invalidatedTableNames.contains($0) }
    if changeSet.invalidatedTableNames.contains(table) || othersChanged || (request.limit != nil && touched != nil)
      || error != nil
    {
      return try refetch()
    }
    guard let touched else { return }
    let changed = Array(Set(touched.inserted + touched.updated)).sorted()
    let tables = context.tables(store)
    let matching = try store.read { db in
      try request.fetchRows(db, tables: tables, onlyRowIDs: changed)
    }
    let old = rowIDs
    for rowID in touched.deleted + changed { remove(rowID) }
    for row in matching {
      insert(row)
      context.register(rowID: row.rowID, table: table.name, storeID: store.storeID, values: row.values)
    }
    report(from: old, changed: Set(matching.map(\.rowID)))
  }

  private func remove(_ rowID: Int64) {
    guard let key = keysByRowID.removeValue(forKey: rowID) else { return }
    let index = position(of: key, rowID)
    rowIDs.remove(at: index)
    keys.remove(at: index)
  }

  private func insert(_ row: FetchedRow) {
    let index = position(of: row.keys, row.rowID)
    rowIDs.insert(row.rowID, at: index)
    keys.insert(row.keys, at: index)
    keysByRowID[row.rowID] = row.keys
  }

  /// Where (keys, rowid) is or belongs in the list: a binary search in the
  /// request's order, rowid last.
  private func position(of key: [DatabaseValue], _ rowID: Int64) -> Int {
    var low = 0
    var high = rowIDs.count
    while low < high {
      let middle = (low + high) / 2
      if order.precedes(keys[middle], rowIDs[middle], key, rowID) { low = middle + 1 } else { high = middle }
    }
    return low
  }

  /// Tells observers how the list went from `old` to now; `changed`: rows
  /// re-read, which are updated in place unless they moved.
  private func report(from old: [Int64], changed: Set<Int64>) {
    let difference = rowIDs.difference(from: old).inferringMoves()
    var moved = Set<Int64>()
    for change in difference {
      if case .insert(_, let rowID, _) = change { moved.insert(rowID) }
    }
    // In list order, without walking the whole list.
    let updated = changed.compactMap { rowID -> (Int, Int64)? in
      guard !moved.contains(rowID), let key = keysByRowID[rowID] else { return nil }
      return (position(of: key, rowID), rowID)
    }.sorted { $0.0 < $1.0 }.map(\.1)
    let change = ResultsChange(
      difference: CollectionDifference(difference.map { $0.mapped(objectID) })!,
      updated: updated.map(objectID))
    guard !change.isEmpty else { return }
    for observer in observers { observer(change) }
    for continuation in continuations.values { continuation.yield(change) }
  }

  private func objectID(_ rowID: Int64) -> ObjectID {
    ObjectID(storeID: store.storeID, table: table.name, rowID: rowID)
  }
}

/// How a results controller's list changed.
public struct ResultsChange: Sendable {
  /// Apply it to the old list of IDs to get the new one; moves are paired
  /// (`associatedWith`).
  public let difference: CollectionDifference<ObjectID>
  /// Rows whose values changed and that stayed where they were.
  public let updated: [ObjectID]

  /// Whether nothing moved, appeared, vanished or changed.
  public var isEmpty: Bool { difference.isEmpty && updated.isEmpty }
}

extension CollectionDifference.Change {
  fileprivate func mapped<T>(_ transform: (ChangeElement) -> T) -> CollectionDifference<T>.Change {
    switch self {
    case .insert(let offset, let element, let associated): .insert(offset: offset, element: transform(element), associatedWith: associated)
    case .remove(let offset, let element, let associated): .remove(offset: offset, element: transform(element), associatedWith: associated)
    }
  }
}
