// After a (re)connect: this host's shipped place on the server and in
// its store, compared and brought back in line.
import Foundation
import GroupSync

extension RelaySession {
  /// After a (re)connect, this host's shipped place on the server and
  /// here are compared:
  /// - the server's is ahead: a relay killed after COMMIT (or cut off
  ///   before its answer came) never wrote its own bookkeeping. Those
  ///   shipments' rows take their positions here, the shipped place moves
  ///   to the server's, and the conflicts they settled are told now, as
  ///   they would have been then.
  /// - the server's is behind: the log lost shipments the server had
  ///   acknowledged (a failover to a standby that had not received them,
  ///   or a restored backup). The shipped place moves back to the
  ///   server's, so that those change sets ship again from this store, and
  ///   the next pass re-synchronises as after a divergence.
  func recover(_ context: ReplicaContext, _ log: SharedLog) throws {
    let enrollment = try log.enroll(context.replica, place: context.place.current.applied)
    if let clock = enrollment.clock {
      context.divergence = Applier.divergence(
        place: context.place.current, head: clock.head, purged: clock.purged, entryAtPlace: clock.entryAtPlace)
    }
    let shipped = enrollment.shipped
    let lastShipment = context.place.current.lastShipment
    if shipped < lastShipment {
      try context.write { db in
        try context.place.change(db) { place in
          place.shipped = shipped
          place.lastShipment = shipped
        }
      }
      context.divergence = context.divergence ??
        "the log lost this host's shipments of local sequences \(shipped + 1)...\(lastShipment) "
        + "(a failover to a standby that had not received them, or a restored backup); they ship again"
      logger.warning("store '\(context.storeName)': \(context.divergence ?? "")")
      return
    }
    guard shipped > lastShipment else { return }
    let entries = try log.ownEntries(context.replica, after: lastShipment).map { own in
      (own.position,
       try LogEntry.decode(own.body, store: context.storeName, sequence: own.position, formats: context.version.reads))
    }
    try context.write { db in
      for (position, entry) in entries { try Shipper.recordWinners(entry, position: position, db) }
      try context.place.change(db) { place in
        place.shipped = max(place.shipped, shipped)
        place.lastShipment = shipped
      }
    }
    for (_, entry) in entries {
      for conflict in entry.conflicts { context.tell(conflict) }
    }
  }
}
