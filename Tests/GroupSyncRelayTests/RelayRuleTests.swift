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

  /// The relay runs in the process's own group folder and writes under its
  /// author there, whatever the folder's store options say; a folder that
  /// is not the configuration's is refused before anything is taken.
  @Test func aRelayRunsInTheProcesssOwnGroupFolderUnderItsOwnAuthor() throws {
    let root = try HostsFolder()
    let group = try GroupFolder(path: root.path + "/one")
    let other = try GroupFolder(path: root.path + "/two")
    // No server: the relay's thread keeps trying to connect meanwhile.
    let configuration = RelayConfiguration(
      folder: root.path + "/one", conninfo: "host=\(root.path)/no-server connect_timeout=1", host: "h")
    let refused = try Relay(configuration)
    #expect(throws: RelayError.invalidConfiguration(
      "the group folder '\(root.path)/two' is not the configuration's folder '\(root.path)/one'")
    ) { try refused.start(in: other) }
    let relay = try Relay(configuration)  // the refusal took no lock
    try relay.start(in: group)
    defer { relay.stop() }
    let entries = try group.store.history(after: 0)
    #expect(entries.last?.author == "groupsync-relay@h")
    try group.store.write { try $0.execute(sql: "CREATE TABLE t(v)") }
    #expect(try group.store.history(after: 0).last?.author == ProcessInfo.processInfo.processName)
  }

  @Test func aRecoveryIsToldInTheWordsItAlwaysHad() {
    let before = RelayError.invalidEntry(
      store: "main", sequence: 7,
      reason: "the log already holds this host's shipment through local sequence 7; recovering")
    #expect("\(RecoveryReason.alreadyShipped(store: "main", through: 7))" == before.description)
  }
}
