// Waiting between passes: for a local commit, a notification from the
// server, the bookkeeping's delay or the poll interval; and taking what
// notifications tell.
import Foundation
import GroupSync
#if canImport(Glibc)
import Glibc
#endif

extension RelaySession {
  /// Waits for what starts the next pass. Notify: a local commit, a
  /// notification, or a quiet ``RelayConfiguration/pollInterval``, after
  /// which the log is read in case a commit went by without a
  /// notification this session saw, and the store in case one went by
  /// without ringing. Poll: a local commit, or the next poll, which reads
  /// the log (and the store, once a second at most).
  func waitBetweenPasses() {
    switch configuration.transport {
    case .notify:
      if waitForWake(configuration.pollInterval) {
        for context in contexts { context.mustReadLog = true }
        localCommits.raise()
      }
    case .poll:
      waitForWake(max(.zero, nextPoll - .now))
      let now = ContinuousClock.now
      guard now >= nextPoll else { return }
      // The next poll an interval after this one was due, not after it
      // ran: a slow pass does not make the polls drift apart.
      nextPoll = max(nextPoll + configuration.pollInterval, now)
      for context in contexts { context.mustReadLog = true }
      if now - lastStoreCheck >= max(configuration.pollInterval, .seconds(1)) {
        lastStoreCheck = now
        localCommits.raise()
      }
    }
  }

  /// Listens on the group's channel, and on the legacy one while an older
  /// member ships there (the notify transport; the poll transport listens
  /// on nothing).
  func listen(_ log: SharedLog) throws {
    guard configuration.transport == .notify, let channel = log.wakes.channel else { return }
    try log.listen(on: log.wakes.olderMembers ? [channel, SharedLog.legacyChannel] : [channel])
  }

  /// Waits for a local commit, a notification or `timeout` (shorter when
  /// this host's bookkeeping is due to be sent); returns true when nothing
  /// came. A notification libpq already read (while a statement ran)
  /// counts at once: the socket will not show it again.
  @discardableResult
  func waitForWake(_ timeout: Duration) -> Bool {
    if let log, log.isConnected, takeNotifications(log) { return false }
    var timeout = timeout
    if let log, let since = log.oldestDeferred {
      timeout = min(timeout, max(.milliseconds(1), since + Self.bookkeepingDelay - .now))
    }
    var fds = [pollfd(fd: wake.readEnd, events: Int16(POLLIN), revents: 0)]
    if let log, log.isConnected, log.socket >= 0 {
      fds.append(pollfd(fd: log.socket, events: Int16(POLLIN), revents: 0))
    }
    let milliseconds = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
    let ready = poll(&fds, nfds_t(fds.count), max(milliseconds, 1))
    guard ready > 0 else { return log?.oldestDeferred == nil }
    if fds[0].revents != 0 { wake.drain() }
    if fds.count > 1, fds[1].revents != 0, let log { takeNotifications(log) }
    return false
  }

  /// Reads the notifications received and hands each store what they
  /// tell about it; returns whether there were any.
  @discardableResult
  func takeNotifications(_ log: SharedLog) -> Bool {
    let received: [(channel: String, payload: String)]
    do {
      received = try log.notifications()
    } catch {
      dropSession("\(error)", tell: true)
      return false
    }
    if !received.isEmpty { trace?.notified() }
    for notification in received {
      let legacy = notification.channel == SharedLog.legacyChannel
      guard legacy || notification.channel == log.wakes.channel else { continue }
      for context in contexts {
        let hint =
          legacy
          ? SharedLog.Hint.parseLegacy(notification.payload, for: context.replica)
          : log.tags[context.storeName].flatMap { SharedLog.Hint.parse(notification.payload, tag: $0) }
        // Under row-level security, only the position: an entry is read
        // from the log (a member could forge one in a wake-up).
        if let hint { context.take(log.entriesRideWakeUps ? hint : SharedLog.Hint(position: hint.position, entry: nil)) }
      }
    }
    return !received.isEmpty
  }
}
