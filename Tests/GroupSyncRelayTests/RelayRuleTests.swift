import Foundation
import GroupSync
import GroupSyncTestSupport
import Testing

@testable import GroupSyncRelay

/// The relay's rules that need no server: its backoff, how it tells
/// PostgreSQL errors apart, and how it words a recovery.
@Suite(.timed) struct RelayRuleTests {
  @Test func theReconnectDelayDoublesUpToItsMaximumAndStartsOverAfterASuccess() {
    var backoff = ReconnectBackoff(maximum: .milliseconds(300))
    let delays = (0..<5).map { _ in backoff.next() }
    #expect(delays == [.milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(300), .milliseconds(300)])
    backoff.reset()
    #expect(backoff.next() == .milliseconds(50))
  }

  /// TCP counts keepalives in whole seconds: the last probe still falls
  /// within the dead-link timeout, a short one (3 s) included.
  @Test func keepalivesGiveUpWithinTheDeadLinkTimeout() {
    for seconds in 2...120 {
      let timeouts = RelayTimeouts(deadLink: .seconds(seconds))
      let silent = timeouts.keepaliveIdleSeconds + timeouts.keepaliveCount * timeouts.keepaliveIntervalSeconds
      #expect(silent <= seconds && timeouts.keepaliveCount >= 1, "dead link \(seconds) s: taken for dead after \(silent) s")
      let parameters = Dictionary(uniqueKeysWithValues: timeouts.clientParameters)
      #expect(parameters["keepalives_count"] == String(timeouts.keepaliveCount))
    }
    #expect(RelayTimeouts().keepaliveCount == 3, "the default 6 s link probes three times")
  }

  @Test func postgresErrorsAreMatchedBySQLState() {
    let lockTimeout = RelayError.postgres(
      call: "PQgetResult", message: "canceling statement due to lock timeout", sqlState: .lockNotAvailable)
    #expect(SQLState.lockNotAvailable ~= lockTimeout)
    #expect(!(SQLState.queryCanceled ~= lockTimeout))
    #expect(!(SQLState.lockNotAvailable ~= RelayError.stopped))
    // A refused statement keeps the session; a broken or ended one does not.
    #expect(lockTimeout.leavesConnectionUsable)
    for state: SQLState in ["08006", .adminShutdown, .crashShutdown, "57P05", .internalError] {
      #expect(!RelayError.postgres(call: "PQgetResult", message: "", sqlState: state).leavesConnectionUsable)
    }
    #expect(RelayError.postgres(call: "PQgetResult", message: "", sqlState: .queryCanceled).leavesConnectionUsable)
    #expect(!RelayError.postgres(call: "PQconnectPoll", message: "", sqlState: nil).leavesConnectionUsable)
  }

  @Test func aRecoveryIsToldInTheWordsItAlwaysHad() {
    let before = RelayError.invalidEntry(
      store: "main", sequence: 7,
      reason: "the log already holds this host's shipment through local sequence 7; recovering")
    #expect("\(RecoveryReason.alreadyShipped(store: "main", through: 7))" == before.description)
  }
}
