import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process whose stdout and stderr are collected as they come, and
/// whose stdin takes lines: the one helper the demo, the benchmark and the
/// tests start processes with.
///
/// Started with `posix_spawn`, every signal unblocked and at its default
/// action: `Foundation.Process` passes on the spawning thread's signal mask,
/// and threads of Swift's pools block nearly all signals, so its children
/// ignored SIGTERM. Output is drained by two plain threads doing blocking
/// reads: `FileHandle.readabilityHandler` (a dispatch source) has crashed
/// libdispatch's event loop on Linux when the pipe closed under it.
///
/// For example:
/// ```swift
/// let child = try ChildProcess(executable: "/bin/cat", arguments: [])
/// child.send("hello")
/// let line = try child.readLine(timeout: 5)   // "hello"
/// let result = child.finish(timeout: 5)       // closes stdin, cat exits
/// ```
///
/// `@unchecked Sendable`: every mutable field is guarded by `condition`.
public final class ChildProcess: @unchecked Sendable {
  /// What a finished child left: its status and everything it printed.
  public struct Result: Sendable {
    /// The exit code, or the signal number if a signal ended it.
    public let status: Int32
    /// Whether it ended by a signal rather than by exiting.
    public let signalled: Bool
    /// Whether `finish` had to signal it because it outlived its timeout.
    public let timedOut: Bool
    public let stdout: String
    public let stderr: String
    /// Its own peak resident memory in KiB (0 unless started
    /// `measuringPeakMemory`), not that of this process or
    /// of its other children: the high-water mark (`VmHWM`) of its
    /// `/proc/PID/status`, read each time this process looked whether it
    /// had exited. (`wait4`'s `ru_maxrss` would count this process's own
    /// peak too: posix_spawn's child shares this process's memory until
    /// it runs exec, and the kernel keeps that memory's high-water mark.)
    public let peakResidentKiB: Int

    /// Whether it exited with status 0 on its own.
    public var succeeded: Bool { status == 0 && !signalled && !timedOut }
  }

  /// A name for error messages ("listener 2 of 4").
  public let name: String
  public let pid: pid_t
  /// The write end of its stdin, -1 once closed.
  private var input: Int32
  private let condition = NSCondition()
  /// The wait status once it was reaped.
  private var waitStatus: Int32?
  /// Its peak resident memory (KiB) as last read while it ran.
  private var peakResidentKiB = 0
  /// Whether each look whether it exited reads its memory too (a read of
  /// /proc every poll: only where a test asks).
  private let measuringPeakMemory: Bool
  private var output = Data()
  private var errors = Data()
  /// Where the next `readLine` starts in `output`.
  private var readOffset = 0
  private var stdoutEnded = false
  private var stderrEnded = false
  private var timedOut = false

  /// Starts `executable` with `arguments`, and `environment` in place of
  /// this process's own if given.
  ///
  /// - Throws: when the program cannot be started.
  /// Starts `executable`; with `measuringPeakMemory`, each look whether it
  /// exited also reads its memory's high-water mark (see
  /// ``Result/peakResidentKiB``, 0 otherwise).
  public init(
    executable: String, arguments: [String], environment: [String: String]? = nil, name: String? = nil,
    measuringPeakMemory: Bool = false
  ) throws {
    self.name = name ?? ([URL(fileURLWithPath: executable).lastPathComponent] + arguments.prefix(1))
      .joined(separator: " ")
    self.measuringPeakMemory = measuringPeakMemory
    _ = Self.ignoreBrokenPipes
    // One spawn at a time: a child started by another thread between
    // pipe() and FD_CLOEXEC would hold this child's pipes open.
    let (stdin, stdout, stderr, pid) = try Self.spawning.withLock {
      let stdin = try Self.pipe(), stdout = try Self.pipe(), stderr = try Self.pipe()
      do {
        let pid = try Self.spawn(
          executable, arguments, environment: environment, stdio: [stdin.read, stdout.write, stderr.write])
        return (stdin, stdout, stderr, pid)
      } catch {
        for fd in [stdin.read, stdin.write, stdout.read, stdout.write, stderr.read, stderr.write] { close(fd) }
        throw error
      }
    }
    self.pid = pid
    // The parent's copies of the child's ends must go, or reads never see EOF.
    for fd in [stdin.read, stdout.write, stderr.write] { close(fd) }
    input = stdin.write
    drain(stdout.read) { child, data in
      if let data { child.output.append(data) } else { child.stdoutEnded = true }
    }
    drain(stderr.read) { child, data in
      if let data { child.errors.append(data) } else { child.stderrEnded = true }
    }
  }

  /// Writing to a child that exited must fail with EPIPE, not kill this
  /// process; children start with every signal at its default again.
  private static let ignoreBrokenPipes: Void = { _ = Glibc.signal(SIGPIPE, SIG_IGN) }()

  private static let spawning = NSLock()

  /// A pipe whose ends are closed on exec (so other children do not hold them).
  private static func pipe() throws -> (read: Int32, write: Int32) {
    var fds: [Int32] = [-1, -1]
    guard Glibc.pipe(&fds) == 0 else { throw ChildProcessError("pipe: \(String(cString: strerror(errno)))") }
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    return (fds[0], fds[1])
  }

  /// posix_spawn with `stdio` as fds 0, 1, 2, an empty signal mask and
  /// default signal actions. The corresponding C function is `posix_spawn`.
  private static func spawn(
    _ executable: String, _ arguments: [String], environment: [String: String]?, stdio: [Int32]
  ) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    for (target, fd) in stdio.enumerated() { posix_spawn_file_actions_adddup2(&actions, fd, Int32(target)) }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var signals = sigset_t()
    sigemptyset(&signals)
    posix_spawnattr_setsigmask(&attributes, &signals)
    sigfillset(&signals)
    posix_spawnattr_setsigdefault(&attributes, &signals)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
    defer { (argv + (envp ?? [])).forEach { free($0) } }
    var pid: pid_t = 0
    let status = envp.map { posix_spawn(&pid, executable, &actions, &attributes, argv, $0) }
      ?? posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
    guard status == 0 else {
      throw ChildProcessError("cannot start \(executable): \(String(cString: strerror(status)))")
    }
    return pid
  }

  /// Runs a program to the end (signalled after `timeout` seconds) and
  /// returns what it left.
  public static func run(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60
  ) throws -> Result {
    try ChildProcess(executable: executable, arguments: arguments, environment: environment)
      .finish(timeout: timeout)
  }

  /// The path of this very executable, to start it again in another role.
  public static var currentExecutable: String {
    var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = buffer.withUnsafeMutableBytes { bytes in
      readlink("/proc/self/exe", bytes.baseAddress!.assumingMemoryBound(to: CChar.self), bytes.count - 1)
    }
    if count > 0 { return String(decoding: buffer.prefix(count), as: UTF8.self) }
    return URL(fileURLWithPath: CommandLine.arguments[0]).path
  }

  /// The project's own executable `name` (`groupsync`, `groupsync-relay`)
  /// as tests start it: beside `$GROUPSYNC_BIN` when set (the sanitizer
  /// builds name their `groupsync` so), else beside the running test
  /// bundle, else in the package's `.build/debug`.
  public static func projectExecutable(_ name: String) -> String {
    if let bin = ProcessInfo.processInfo.environment["GROUPSYNC_BIN"] {
      return URL(fileURLWithPath: bin).deletingLastPathComponent().appendingPathComponent(name).path
    }
    let candidates = [
      URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name).path,
      Bundle.main.bundleURL.appendingPathComponent(name).path,
      // Sources/GroupSyncProcess/ChildProcess.swift -> the package.
      URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".build/debug/" + name).path,
    ]
    return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates.last!
  }

  /// Reads `fd` until EOF on a thread of its own, handing each chunk and
  /// then nil (the end) to `append` under the lock; closes `fd`.
  private func drain(_ fd: Int32, _ append: @escaping @Sendable (ChildProcess, Data?) -> Void) {
    let thread = Thread { [self] in
      var buffer = [UInt8](repeating: 0, count: 65536)
      while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        if count <= 0 { break }
        let data = Data(buffer[0..<count])
        locked { append(self, data) }
      }
      close(fd)
      locked { append(self, nil) }
    }
    thread.start()
  }

  /// Runs `body` under the lock and wakes every waiter afterwards.
  private func locked<T>(_ body: () throws -> T) rethrows -> T {
    condition.lock()
    defer {
      condition.broadcast()
      condition.unlock()
    }
    return try body()
  }

  /// Whether it has not exited yet (a stopped child is running).
  public var isRunning: Bool { locked { reap() } == nil }

  /// Its wait status once it exited, reaping it; the lock is held.
  private func reap() -> Int32? {
    if waitStatus == nil {
      // Read before it may be reaped: an exited process has no memory left to tell of.
      if measuringPeakMemory { peakResidentKiB = max(peakResidentKiB, Self.highWaterKiB(of: pid) ?? 0) }
      var status: Int32 = 0
      var result: pid_t
      repeat { result = waitpid(pid, &status, WNOHANG) } while result < 0 && errno == EINTR
      if result == pid { waitStatus = status }
    }
    return waitStatus
  }

  /// The `VmHWM` of `/proc/PID/status` (KiB); nil once the process exited.
  private static func highWaterKiB(of pid: pid_t) -> Int? {
    // Read with read(2): /proc's files say they are empty to stat.
    let fd = open("/proc/\(pid)/status", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes = [UInt8](repeating: 0, count: 8192)
    let count = read(fd, &bytes, bytes.count)
    guard count > 0,
      let line = String(decoding: bytes[..<count], as: UTF8.self).split(separator: "\n")
        .first(where: { $0.hasPrefix("VmHWM:") })
    else { return nil }
    // "VmHWM:\t   12345 kB"
    return Int(line.dropFirst("VmHWM:".count).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "")
  }

  /// Everything it printed on stdout so far.
  public var stdout: String { locked { String(decoding: output, as: UTF8.self) } }
  /// Everything it printed on stderr so far.
  public var stderr: String { locked { String(decoding: errors, as: UTF8.self) } }

  /// Writes `line` and a newline to its stdin; a child that is gone is ignored.
  public func send(_ line: String) {
    locked {
      guard input >= 0 else { return }
      let bytes = Array((line + "\n").utf8)
      var sent = 0
      while sent < bytes.count {
        let count = bytes[sent...].withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        if count <= 0 { return }
        sent += count
      }
    }
  }

  /// Closes its stdin: a child reading it sees the end of input.
  public func closeInput() {
    locked {
      if input >= 0 { close(input) }
      input = -1
    }
  }

  /// The next stdout line not read yet, without its newline, waiting up to
  /// `timeout` seconds for it.
  ///
  /// - Throws: ``ChildProcessError`` when none comes in time or stdout ended.
  public func readLine(timeout: Double) throws -> String {
    let deadline = Date().addingTimeInterval(timeout)
    condition.lock()
    defer { condition.unlock() }
    while true {
      if let newline = output[readOffset...].firstIndex(of: UInt8(ascii: "\n")) {
        let line = String(decoding: output[readOffset..<newline], as: UTF8.self)
        readOffset = newline + 1
        return line
      }
      if stdoutEnded {
        // Its last words are on stderr, drained by another thread.
        while !stderrEnded && condition.wait(until: deadline) {}
        throw ChildProcessError("\(name) exited: \(String(decoding: errors.suffix(2000), as: UTF8.self))")
      }
      if !condition.wait(until: deadline) {
        throw ChildProcessError(
          "\(name) did not answer within \(Int(timeout)) s: \(String(decoding: errors.suffix(2000), as: UTF8.self))")
      }
    }
  }

  /// Waits until stderr contains `text` (e.g. "listening as").
  public func waitForStderr(containing text: String, timeout: Double = 30) throws {
    try waitUntil(timeout: timeout, "stderr to contain '\(text)'") { _, errors in
      String(decoding: errors, as: UTF8.self).contains(text)
    }
  }

  /// Waits until stdout holds `count` lines.
  public func waitForLines(_ count: Int, timeout: Double = 30) throws {
    try waitUntil(timeout: timeout, "\(count) lines on stdout") { output, _ in
      output.lazy.filter { $0 == UInt8(ascii: "\n") }.count >= count
    }
  }

  /// Waits until `done(stdout, stderr)` holds, or output ended without it.
  private func waitUntil(timeout: Double, _ what: String, _ done: (Data, Data) -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    condition.lock()
    defer { condition.unlock() }
    while !done(output, errors) {
      if (stdoutEnded && stderrEnded) || !condition.wait(until: deadline) {
        throw ChildProcessError(
          "\(name): timed out waiting for \(what); stdout: \(String(decoding: output, as: UTF8.self)) stderr: \(String(decoding: errors, as: UTF8.self))")
      }
    }
  }

  /// Sends it signal `number` (SIGTERM, SIGKILL, SIGSTOP, SIGCONT...).
  public func signal(_ number: Int32) {
    // Once reaped, its pid may be another process's.
    locked { if reap() == nil { kill(pid, number) } }
  }

  /// Waits up to `timeout` seconds for it to exit on its own (stdin stays
  /// open); returns whether it did.
  public func waitForExit(timeout: Double) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while isRunning && Date() < deadline { usleep(2_000) }
    return !isRunning
  }

  /// Waits for it to exit: SIGTERM after `timeout` seconds, SIGKILL if it
  /// is still there 5 s later. Closes its stdin first unless `closingInput`
  /// is false.
  public func finish(timeout: Double = 60, closingInput: Bool = true) -> Result {
    if closingInput { closeInput() }
    if !waitForExit(timeout: timeout) {
      locked { timedOut = true }
      signal(SIGCONT)
      signal(SIGTERM)
      if !waitForExit(timeout: 5) { signal(SIGKILL) }
    }
    while isRunning { usleep(2_000) }
    closeInput()
    // Children of the child may still hold the pipes: wait a little only.
    let drained = Date().addingTimeInterval(5)
    return locked {
      while !(stdoutEnded && stderrEnded) && condition.wait(until: drained) {}
      // The wait status: the signal in its low 7 bits, else the exit code above.
      let status = waitStatus ?? 0
      let signal = status & 0x7f
      return Result(
        status: signal == 0 ? (status >> 8) & 0xff : signal, signalled: signal != 0,
        timedOut: timedOut, stdout: String(decoding: output, as: UTF8.self),
        stderr: String(decoding: errors, as: UTF8.self), peakResidentKiB: peakResidentKiB)
    }
  }

  deinit {
    if input >= 0 { close(input) }
    // A child never finished is asked to go; no one waits for it.
    if reap() == nil { kill(pid, SIGTERM) }
  }
}

/// A child that did not do what was waited for, with what it printed.
public struct ChildProcessError: Error, CustomStringConvertible {
  public let description: String
  public init(_ description: String) { self.description = description }
}
