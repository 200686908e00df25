import GRDB

extension Store {
  /// How many change sets the history holds after `sequence` that
  /// `author` did not write, as `db`'s transaction sees it: what a relay,
  /// which writes under its own author label, has still to send of this
  /// store. A change set without an author counts. For example:
  ///
  /// ```swift
  /// let unshipped = try store.read { db in
  ///   try store.changeSetCount(after: shippedSequence, notWrittenBy: "groupsync-relay@web-1", in: db)
  /// }
  /// ```
  ///
  /// Change sets purged from the history are not counted.
  ///
  /// - Parameters:
  ///   - sequence: the sequence number to count after.
  ///   - author: the author label (``StoreOptions/author``) whose change
  ///     sets are left out.
  ///   - db: a transaction open on this store (from `read(_:)` or
  ///     `write(_:)`).
  /// - Returns: the count; 0 for a read-only store.
  public func changeSetCount(after sequence: Int64, notWrittenBy author: String, in db: Database) throws -> Int64 {
    if isReadOnly { return 0 }
    return try History.count(after: sequence, notWrittenBy: author, db)
  }
}
