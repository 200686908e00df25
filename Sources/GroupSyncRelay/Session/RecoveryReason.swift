/// Why a relay's pass stops short so that the relay reads its places back
/// from the log (``Relay``'s recovery) before it goes on: an outcome of
/// the pass, not an error. The connection stays; the reason is reported
/// as the pass's error, in the words it always had.
enum RecoveryReason: Sendable, Equatable, CustomStringConvertible {
  /// The log already holds this host's shipment of `store` through local
  /// sequence `through`, past its shipped place here: a relay killed
  /// between COMMIT and its own bookkeeping, or a COMMIT whose answer was
  /// lost.
  case alreadyShipped(store: String, through: Int64)

  var description: String {
    switch self {
    case .alreadyShipped(let store, let through):
      // Said as it was when this was thrown as an invalid entry.
      "invalid entry #\(through) of store '\(store)' in the shared log: "
        + "the log already holds this host's shipment through local sequence \(through); recovering"
    }
  }
}
