import Foundation

/// Runs the project's own `groupsync` binary, as users and other processes do.
enum CLI {
  /// The built binary: $GROUPSYNC_BIN, else next to the test bundle, else
  /// in .build/debug of the package.
  static let executable: String = {
    if let path = ProcessInfo.processInfo.environment["GROUPSYNC_BIN"] { return path }
    let candidates = [
      URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("groupsync").path,
      Bundle.main.bundleURL.appendingPathComponent("groupsync").path,
      URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".build/debug/groupsync").path,
    ]
    return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates.last!
  }()

  struct Result {
    let status: Int32
    let stdout: String
    let stderr: String
  }

  /// Runs `groupsync args...` to completion.
  static func run(_ arguments: [String], timeout: Double = 60) throws -> Result {
    let child = try Child(arguments)
    return try child.finish(timeout: timeout)
  }

  /// A `groupsync` process running in the background.
  ///
  /// Its output is drained by two plain threads doing blocking reads:
  /// `FileHandle.readabilityHandler` (a dispatch source) has crashed
  /// libdispatch's event loop on Linux when the pipe closed under it.
  final class Child: @unchecked Sendable {
    let process = Process()
    private let stdoutPipe = Pipe()
    private let stderrPipe = Pipe()
    private let lock = NSLock()
    private var output = Data()
    private var errors = Data()
    private let drained = DispatchGroup()

    init(_ arguments: [String]) throws {
      process.executableURL = URL(fileURLWithPath: CLI.executable)
      process.arguments = arguments
      process.standardOutput = stdoutPipe
      process.standardError = stderrPipe
      try process.run()
      // The parent's copies of the write ends must go, or reads never see EOF.
      try stdoutPipe.fileHandleForWriting.close()
      try stderrPipe.fileHandleForWriting.close()
      drain(stdoutPipe.fileHandleForReading.fileDescriptor) { child, data in child.output.append(data) }
      drain(stderrPipe.fileHandleForReading.fileDescriptor) { child, data in child.errors.append(data) }
    }

    /// Reads `fd` until EOF on a thread of its own.
    private func drain(_ fd: Int32, _ append: @escaping @Sendable (Child, Data) -> Void) {
      drained.enter()
      let thread = Thread { [self] in
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
          let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
          if count < 0 && errno == EINTR { continue }
          if count <= 0 { break }
          let data = Data(buffer[0..<count])
          lock.withLock { append(self, data) }
        }
        drained.leave()
      }
      thread.start()
    }

    var stdout: String { lock.withLock { String(decoding: output, as: UTF8.self) } }
    var stderr: String { lock.withLock { String(decoding: errors, as: UTF8.self) } }

    /// Waits until stderr contains `text` (e.g. "listening as").
    func waitForStderr(_ text: String, timeout: Double = 30) throws {
      try waitUntil(timeout: timeout, "stderr to contain '\(text)'") { self.stderr.contains(text) }
    }

    /// Waits until stdout holds `count` lines.
    func waitForLines(_ count: Int, timeout: Double = 30) throws {
      try waitUntil(timeout: timeout, "\(count) lines on stdout") {
        self.stdout.split(separator: "\n").count >= count
      }
    }

    private func waitUntil(timeout: Double, _ what: String, _ condition: () -> Bool) throws {
      let deadline = Date().addingTimeInterval(timeout)
      while Date() < deadline {
        if condition() { return }
        if !process.isRunning && !condition() {
          usleep(50_000)  // let the pipes drain
          if condition() { return }
          break
        }
        usleep(5_000)
      }
      throw TestFailure("timed out waiting for \(what); stdout: \(stdout) stderr: \(stderr)")
    }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for exit, killing the process after `timeout` seconds.
    func finish(timeout: Double = 60) throws -> Result {
      let deadline = Date().addingTimeInterval(timeout)
      while process.isRunning && Date() < deadline { usleep(5_000) }
      if process.isRunning { process.terminate() }
      process.waitUntilExit()
      // Children of the child may still hold the pipes: wait a little only.
      _ = drained.wait(timeout: .now() + 5)
      return Result(status: process.terminationStatus, stdout: stdout, stderr: stderr)
    }

    deinit {
      if process.isRunning { process.terminate() }
    }
  }
}

struct TestFailure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// Parses JSON lines into objects.
func jsonLines(_ text: String) throws -> [[String: Any]] {
  try text.split(separator: "\n").map {
    guard let object = try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] else {
      throw TestFailure("not a JSON object: \($0)")
    }
    return object
  }
}
