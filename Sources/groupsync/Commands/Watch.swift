import ArgumentParser
import Foundation
import GroupSync

struct Watch: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Listen and print every change set other processes commit, in order.")

  @Argument(help: "The group folder.")
  var directory: String

  @Option(name: .long, help: "The listener's name (default: a unique name, removed on exit).")
  var name: String?

  @Option(name: .long, help: "Exit after this many change sets.")
  var count: Int?

  @Flag(name: .long, help: "Print one JSON object per line.")
  var json = false

  @Option(name: .long, help: "Milliseconds a missing change set may stay missing before it is read from the history.")
  var graceMs: Int = 1000

  @Flag(name: .long, help: "Keep the listener's place while it is not running and resume from it (needs --name).")
  var durable = false

  func validate() throws {
    if let count, count < 1 { throw ValidationError("--count must be at least 1") }
    guard graceMs >= 0 else { throw ValidationError("--grace-ms must not be negative") }
    if durable && name == nil { throw ValidationError("--durable needs --name: the place is kept under that name") }
  }

  func run() async throws {
    try await GroupSyncCommand.reportingErrors {
      let group = try GroupFolder(path: directory, create: false)
      var options = ListenerOptions()
      options.gracePeriod = .milliseconds(graceMs)
      let listener = try group.listen(as: name, durable: durable, options: options)
      // Printed on the watcher thread as each change set is read: one
      // wake-up per change set. The command ends when the listener closes.
      let finished = Finished()
      // Before 'listening as': a signal sent as soon as it is seen stops us.
      let stopper = SignalStopper {
        listener.close()
        finished.fire()
      }
      defer { withExtendedLifetime(stopper) {} }
      FileHandle.standardError.write(
        Data("groupsync: listening as \(listener.name) from sequence \(listener.startSequence)\n".utf8))
      let count = count
      nonisolated(unsafe) var delivered = 0  // the watcher thread's alone
      await finished.wait(after: {
        listener.startOnWatcherThread { [json] event in
          switch event {
          case .changes(let changeSet):
            let now = Int64(Date().timeIntervalSince1970 * 1e9)
            let store = try? group.store(withID: changeSet.storeID)
            let storeName = store?.name ?? "?"
            printLine(
              json
                ? ChangeSetJSON.line(
                  changeSet, storeName: storeName, deliveredAtNs: now,
                  globalIDs: ChangeSetJSON.globalIDs(of: changeSet, in: store))
                : Self.text(changeSet, storeName: storeName))
            delivered += 1
          case .reset(let reset):
            printLine(json ? ChangeSetJSON.line(reset, mainStore: group.store.storeID) : "reset: \(reset)")
          }
          if let count, delivered >= count {
            listener.close()
            finished.fire()
          }
        }
      })
      listener.close()
    }
  }

  static func text(_ changeSet: ChangeSet, storeName: String) -> String {
    var lines = ["#\(changeSet.sequence) (store \(storeName))"]
    for (label, ids) in [("inserted", changeSet.inserted), ("updated", changeSet.updated), ("deleted", changeSet.deleted)]
    where !ids.isEmpty {
      lines.append("  \(label): " + ids.map(\.uri).sorted().joined(separator: " "))
    }
    if !changeSet.invalidatedTables.isEmpty {
      lines.append("  invalidated: " + changeSet.invalidatedTables.map(\.uri).sorted().joined(separator: " "))
    }
    for change in changeSet.defaultsChanges {
      lines.append("  defaults \(change.suite)/\(change.key): \(DefaultsCommand.describe(change.oldValue)) -> \(DefaultsCommand.describe(change.newValue))")
    }
    for notification in changeSet.notifications {
      let payload = String(validating: notification.payload, as: UTF8.self) ?? "\(notification.payload.count) bytes"
      lines.append("  notification \(notification.name): \(payload)")
    }
    return lines.joined(separator: "\n")
  }
}

/// Resumes a waiting task once, whoever fires first (a signal, the
/// handler on the watcher thread).
final class Finished: @unchecked Sendable {
  private let lock = NSLock()  // pthread: visible to ThreadSanitizer
  private var fired = false
  private var waiter: CheckedContinuation<Void, Never>?

  /// Runs `start`, then waits until ``fire()`` was called (before or after).
  func wait(after start: () -> Void) async {
    await withCheckedContinuation { continuation in
      let firedAlready = lock.withLock {
        if !fired { waiter = continuation }
        return fired
      }
      if firedAlready { continuation.resume() }
      start()
    }
  }

  func fire() {
    let waiter: CheckedContinuation<Void, Never>? = lock.withLock {
      defer { self.waiter = nil }
      fired = true
      return self.waiter
    }
    waiter?.resume()
  }
}

/// Turns SIGINT and SIGTERM into one call of `stop`, for a clean exit.
///
/// The handler is installed with sigaction before `init` returns, so no
/// signal sent afterwards is lost; it only writes a byte to a pipe (the
/// one async-signal-safe thing to do), and a thread reading the pipe calls
/// `stop`.
final class SignalStopper: Sendable {
  init(_ stop: @escaping @Sendable () -> Void) {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { fatalError("pipe failed: \(errno)") }
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    signalPipeWriteEnd = fds[1]
    let readEnd = fds[0]
    Thread.detachNewThread {
      var byte: UInt8 = 0
      while read(readEnd, &byte, 1) < 0 && errno == EINTR {}
      stop()
    }
    var action = sigaction()
    action.__sigaction_handler.sa_handler = { _ in
      var byte: UInt8 = 1
      _ = write(signalPipeWriteEnd, &byte, 1)
    }
    action.sa_flags = SA_RESTART
    sigemptyset(&action.sa_mask)
    for signalNumber in [SIGINT, SIGTERM] { sigaction(signalNumber, &action, nil) }
  }
}

/// Written by the signal handler, which cannot capture context.
nonisolated(unsafe) private var signalPipeWriteEnd: Int32 = -1
