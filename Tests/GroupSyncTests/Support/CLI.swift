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
  final class Child: @unchecked Sendable {
    let process = Process()
    private let stdoutPipe = Pipe()
    private let stderrPipe = Pipe()
    private let lock = NSLock()
    private var output = Data()
    private var errors = Data()

    init(_ arguments: [String]) throws {
      process.executableURL = URL(fileURLWithPath: CLI.executable)
      process.arguments = arguments
      process.standardOutput = stdoutPipe
      process.standardError = stderrPipe
      stdoutPipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
        let data = handle.availableData
        self?.lock.withLock { self?.output.append(data) }
      }
      stderrPipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
        let data = handle.availableData
        self?.lock.withLock { self?.errors.append(data) }
      }
      try process.run()
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
      stdoutPipe.fileHandleForReading.readabilityHandler = nil
      stderrPipe.fileHandleForReading.readabilityHandler = nil
      let rest = stdoutPipe.fileHandleForReading.readDataToEndOfFile()
      let restErrors = stderrPipe.fileHandleForReading.readDataToEndOfFile()
      lock.withLock {
        output.append(rest)
        errors.append(restErrors)
      }
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
