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
  /// The log's shipped place of this host for `store` is `server`, below
  /// the `here` it had acknowledged: it lost shipments (a failover that a
  /// pooler kept from ending the relay's session, a restored backup).
  case serverBehind(store: String, server: Int64, here: Int64)
  /// A read of `store`'s log found it no longer holds what this host
  /// applied (`reason`), the session having lived on.
  case logDiverged(store: String, reason: String)

  var description: String {
    switch self {
    case .alreadyShipped(let store, let through):
      // Said as it was when this was thrown as an invalid entry.
      "invalid entry #\(through) of store '\(store)' in the shared log: "
        + "the log already holds this host's shipment through local sequence \(through); recovering"
    case .serverBehind(let store, let server, let here):
      "store '\(store)': the shared log holds this host's shipments through local sequence \(server) only, "
        + "below the \(here) it had acknowledged (a failover, or a restored backup); recovering"
    case .logDiverged(let store, let reason):
      "store '\(store)': \(reason); reading this host's places back before re-synchronising"
    }
  }
}
