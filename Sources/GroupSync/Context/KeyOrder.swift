import GRDB

/// SQLite's order for a request's sort keys, rowid last, so that a results
/// controller places a row exactly where `ORDER BY` would: NULL first, then
/// numbers (integers and reals compared by value), text under the key's
/// collation, blobs by their bytes.
struct KeyOrder {
  let descriptors: [SortDescriptor]

  init(_ descriptors: [SortDescriptor]) {
    self.descriptors = descriptors
  }

  /// Whether (a, aRowID) comes before (b, bRowID).
  func precedes(_ a: [DatabaseValue], _ aRowID: Int64, _ b: [DatabaseValue], _ bRowID: Int64) -> Bool {
    for (index, descriptor) in descriptors.enumerated() {
      let result = Self.compare(a[index], b[index], descriptor.collation)
      if result != 0 { return descriptor.ascending ? result < 0 : result > 0 }
    }
    return aRowID < bRowID
  }

  /// -1, 0 or 1, as SQLite compares two values.
  static func compare(_ a: DatabaseValue, _ b: DatabaseValue, _ collation: SortDescriptor.Collation) -> Int {
    switch (a.storage, b.storage) {
    case (.null, .null): return 0
    case (.null, _): return -1
    case (_, .null): return 1
    case (.int64(let x), .int64(let y)): return x < y ? -1 : (x > y ? 1 : 0)
    case (.double(let x), .double(let y)): return x < y ? -1 : (x > y ? 1 : 0)
    case (.int64(let x), .double(let y)): return -compare(y, x)
    case (.double(let x), .int64(let y)): return compare(x, y)
    case (.int64, _), (.double, _): return -1
    case (_, .int64), (_, .double): return 1
    case (.string(let x), .string(let y)):
      return collation == .nocase
        ? bytes(SQLIdentifier.asciiFolded(x), SQLIdentifier.asciiFolded(y)) : bytes(Array(x.utf8), Array(y.utf8))
    case (.string, .blob): return -1
    case (.blob, .string): return 1
    case (.blob(let x), .blob(let y)): return bytes(Array(x), Array(y))
    }
  }

  /// A real against an integer, exactly (an Int64 does not always fit a Double).
  private static func compare(_ real: Double, _ integer: Int64) -> Int {
    if real < -9.223372036854775808e18 { return -1 }
    if real >= 9.223372036854775808e18 { return 1 }
    let truncated = Int64(real)
    if truncated != integer { return truncated < integer ? -1 : 1 }
    let fraction = real - Double(truncated)
    return fraction < 0 ? -1 : (fraction > 0 ? 1 : 0)
  }

  private static func bytes(_ x: [UInt8], _ y: [UInt8]) -> Int {
    for (p, q) in zip(x, y) where p != q { return p < q ? -1 : 1 }
    return x.count < y.count ? -1 : (x.count > y.count ? 1 : 0)
  }
}
