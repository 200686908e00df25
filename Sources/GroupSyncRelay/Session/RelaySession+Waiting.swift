// Waiting between passes: for a local commit, a notification from the
// server, the bookkeeping's delay or the poll interval; and taking what
// notifications tell.
import Foundation
import GroupSync
#if canImport(Glibc)
import Glibc
#endif

extension RelaySession {
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
    for notification in received where notification.channel == SharedLog.channel {
      for context in contexts {
        if let hint = SharedLog.Hint.parse(notification.payload, for: context.replica) { context.take(hint) }
      }
    }
    return !received.isEmpty
  }
}
