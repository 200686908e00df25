// Faults a test asks a relay process for, at instants no outside fault
// can hit on purpose.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Faults a test asks a relay process for through the environment
/// (`GROUPSYNC_RELAY_FAILPOINT`), at the instants no outside fault can hit
/// on purpose. None is set in normal use, and each costs one branch.
///
/// - `kill-after-ship-commit:N`: SIGKILL right after the Nth shipment's
///   COMMIT returned, before the relay's own bookkeeping.
/// - `stall-in-shipment:SECONDS`: the first shipment that carries rows
///   takes the settled path (as when rows moved), and after its row
///   locks are taken and before the statement that takes the position,
///   print `groupsync-relay: failpoint stall-in-shipment` on stderr and
///   stop talking to the server for SECONDS (a frozen host).
/// - `gate-before-apply:PATH`: before each local transaction that applies
///   log entries, wait while the file PATH exists, having printed
///   `groupsync-relay: failpoint gate-before-apply` once per wait.
/// - `no-wake-ups:1`: shipments wake no one, as if every wake-up were
///   lost (the relay died between the shipment's commit and its wake-up's).
final class RelayFailpoints: @unchecked Sendable {
  static let variable = "GROUPSYNC_RELAY_FAILPOINT"

  private let lock = NSLock()
  private var shipmentsLeftBeforeKill: Int?
  private var stallSeconds: Double?
  private let applyGate: String?
  /// Whether shipments send no wake-up.
  let sendsNoWakeUps: Bool

  init(_ text: String? = ProcessInfo.processInfo.environment[RelayFailpoints.variable]) {
    var applyGate: String?
    var sendsNoWakeUps = false
    if let text {
      let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
      if parts.count == 2 {
        switch parts[0] {
        case "kill-after-ship-commit": shipmentsLeftBeforeKill = Int(parts[1])
        case "stall-in-shipment": stallSeconds = Double(parts[1])
        case "gate-before-apply": applyGate = parts[1]
        case "no-wake-ups": sendsNoWakeUps = parts[1] == "1"
        default: break
        }
      }
    }
    self.applyGate = applyGate
    self.sendsNoWakeUps = sendsNoWakeUps
  }

  /// Counts a shipment whose COMMIT returned; SIGKILLs the process at the
  /// count asked for.
  func shipmentCommitted() {
    let kill = lock.withLock { () -> Bool in
      guard let left = shipmentsLeftBeforeKill else { return false }
      shipmentsLeftBeforeKill = left - 1
      return left - 1 <= 0
    }
    if kill { raise(SIGKILL) }
  }

  /// Whether a stall waits for the next shipment, if it carries rows: that
  /// shipment then takes the settled path, whose two round trips the
  /// stall comes between.
  func stallsNextShipment(carriesRows: Bool) -> Bool {
    carriesRows && lock.withLock { stallSeconds != nil }
  }

  /// Stalls the first shipment that carries rows (once), or until `stop`
  /// rings.
  func stallInShipment(stop: WakePipe?, carriesRows: Bool) {
    guard carriesRows, let seconds = lock.withLock({ () -> Double? in
      defer { stallSeconds = nil }
      return stallSeconds
    }) else { return }
    FileHandle.standardError.write(Data("groupsync-relay: failpoint stall-in-shipment\n".utf8))
    var fds = [pollfd(fd: stop?.readEnd ?? -1, events: Int16(POLLIN), revents: 0)]
    _ = poll(&fds, 1, Int32(seconds * 1000))
  }

  /// Waits while the apply gate's file exists (or until `stop` rings).
  func waitAtApplyGate(stop: WakePipe?) {
    guard let applyGate, access(applyGate, F_OK) == 0 else { return }
    FileHandle.standardError.write(Data("groupsync-relay: failpoint gate-before-apply\n".utf8))
    while access(applyGate, F_OK) == 0 {
      var fds = [pollfd(fd: stop?.readEnd ?? -1, events: Int16(POLLIN), revents: 0)]
      if poll(&fds, 1, 20) > 0 { return }
    }
  }
}
