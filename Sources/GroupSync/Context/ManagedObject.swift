import GRDB

/// One row of a store, registered in a ``Context``: the values last read
/// from the store (its snapshot) and the edits not saved yet on top.
///
/// A context holds at most one object per ``ObjectID``. An object is
/// confined to its context's actor or thread, like the context itself.
///
/// ```swift
/// let note = try context.existingObject(with: id)
/// var record = try note.decode(Note.self)   // the user's GRDB record type
/// record.body = "edited"
/// try note.update(from: record)              // pending until context.save()
/// ```
public final class ManagedObject {
  /// What the object knows of its row in the store.
  enum StoreState {
    /// Not read yet: the first access loads it.
    case fault
    /// The row's values when last read.
    case snapshot(RowValues)
    /// The row no longer exists in the store; `last`: its values when last
    /// read, for a pending edit's save to resolve.
    case gone(last: RowValues?)
    /// Inserted in the context, not saved yet.
    case new
  }

  /// The row's ID; temporary (``ObjectID/isTemporary``) until the insert is
  /// saved.
  public internal(set) var objectID: ObjectID
  /// Weak, as in Core Data: an object outlives its context only as values.
  weak var context: Context?
  var state: StoreState
  /// Column values set and not saved, by column name as the user wrote it.
  var pending: RowValues = RowValues()
  /// Deleted in the context, not saved yet.
  public internal(set) var isDeleted = false

  init(objectID: ObjectID, context: Context, state: StoreState) {
    self.objectID = objectID
    self.context = context
    self.state = state
  }

  /// Whether the row has not been read yet.
  public var isFault: Bool { if case .fault = state { true } else { false } }
  /// Inserted in the context and not saved yet.
  public var isInserted: Bool { if case .new = state { true } else { false } }
  /// The row was deleted in the store (by a save or another process); its
  /// values can no longer be read.
  public var isGone: Bool { if case .gone = state { true } else { false } }

  /// The values the pending edits are based on: the snapshot, or a gone
  /// row's last values.
  var baseValues: RowValues? {
    switch state {
    case .snapshot(let values): values
    case .gone(let last): last
    case .fault, .new: nil
    }
  }
  /// Whether the object has unsaved edits, or is an unsaved insert or delete.
  public var hasChanges: Bool { isInserted || isDeleted || !pending.isEmpty }

  /// The row's values as the store last had them (nil for a fault, an
  /// unsaved insert or a gone row).
  public var snapshot: Row? {
    if case .snapshot(let values) = state { values.row } else { nil }
  }

  /// The columns set and not saved.
  public var changedValues: Row { pending.row }

  /// The current values: the snapshot with the pending edits on top. A
  /// fault is read first; a gone row throws ``ContextError/objectGone(_:)``.
  public func row() throws -> Row {
    try values().row
  }

  /// The current value of `column` (see ``row()``).
  public func value(_ column: String) throws -> DatabaseValue {
    try values()[column] ?? .null
  }

  /// The current values decoded as the user's GRDB record type.
  public func decode<Record: FetchableRecord>(_ type: Record.Type) throws -> Record {
    try Record(row: row())
  }

  /// Sets `column` to `value`, pending until ``Context/save()``.
  public func set(_ column: String, to value: (any DatabaseValueConvertible)?) throws {
    try checkEditable()
    pending[column] = value?.databaseValue ?? .null
    context?.objectDidChange(self)
  }

  /// Sets every column of `record` whose value differs from the current one,
  /// pending until ``Context/save()``.
  public func update(from record: some EncodableRecord) throws {
    try checkEditable()
    let current = try values()
    for (column, value) in try record.databaseDictionary where current[column] != value {
      pending[column] = value
    }
    context?.objectDidChange(self)
  }

  /// The snapshot with the pending edits on top, reading a fault first.
  func values() throws -> RowValues {
    switch state {
    case .fault:
      guard let context else { throw ContextError.contextReleased(objectID) }
      try context.fulfill(self)
      return try values()
    case .snapshot(let values):
      return pending.isEmpty ? values : values.overlaid(by: pending)
    case .new:
      return pending
    case .gone:
      throw ContextError.objectGone(objectID)
    }
  }

  private func checkEditable() throws {
    if context == nil { throw ContextError.contextReleased(objectID) }
    if isDeleted { throw ContextError.objectDeleted(objectID) }
    if isGone { throw ContextError.objectGone(objectID) }
  }
}

/// Column values of one row in column order, compared by column name
/// ignoring ASCII case as SQLite does.
struct RowValues: Equatable {
  private(set) var columns: [String] = []
  private(set) var values: [DatabaseValue] = []

  init() {}

  /// A row's values, leaving out its first `skipped` columns.
  init(_ row: Row, droppingFirst skipped: Int = 0) {
    columns.reserveCapacity(row.count - skipped)
    values.reserveCapacity(row.count - skipped)
    for (index, (column, value)) in row.enumerated() where index >= skipped {
      columns.append(column)
      values.append(value)
    }
  }

  /// The columns in order, with their values.
  var pairs: Zip2Sequence<[String], [DatabaseValue]> { zip(columns, values) }

  var isEmpty: Bool { columns.isEmpty }

  subscript(column: String) -> DatabaseValue? {
    get { index(of: column).map { values[$0] } }
    set {
      if let index = index(of: column) {
        if let newValue { values[index] = newValue } else {
          columns.remove(at: index)
          values.remove(at: index)
        }
      } else if let newValue {
        columns.append(column)
        values.append(newValue)
      }
    }
  }

  /// These values with `other`'s on top.
  func overlaid(by other: RowValues) -> RowValues {
    var result = self
    for (column, value) in zip(other.columns, other.values) { result[column] = value }
    return result
  }

  var dictionary: [String: DatabaseValue] {
    Dictionary(zip(columns, values), uniquingKeysWith: { a, _ in a })
  }

  /// The values as a GRDB row (a record type decodes it by column name).
  var row: Row {
    Row(Dictionary(zip(columns, values.map { $0 as (any DatabaseValueConvertible)? }), uniquingKeysWith: { a, _ in a }))
  }

  private func index(of column: String) -> Int? {
    if let exact = columns.firstIndex(of: column) { return exact }
    let wanted = SQLIdentifier.asciiFolded(column)
    return columns.firstIndex { SQLIdentifier.asciiFolded($0) == wanted }
  }
}
