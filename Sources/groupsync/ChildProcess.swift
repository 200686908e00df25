import Foundation

/// A child process of this binary whose output is collected.
final class ChildProcess: @unchecked Sendable {
  private let process = Process()
  private let stdout = Pipe()
  private let stderr = Pipe()
  private let lock = NSLock()
  private var output = Data()
  private var errors = Data()

  init(_ executable: String, _ arguments: [String]) throws {
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.standardOutput = stdout
    process.standardError = stderr
    stdout.fileHandleForReading.readabilityHandler = { [weak self] handle in
      let data = handle.availableData
      self?.lock.withLock { self?.output.append(data) }
    }
    stderr.fileHandleForReading.readabilityHandler = { [weak self] handle in
      let data = handle.availableData
      self?.lock.withLock { self?.errors.append(data) }
    }
    try process.run()
  }

  /// Waits until stderr has a line containing `text`.
  func waitForStderrLine(containing text: String, timeout: Double) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
      if lock.withLock({ String(decoding: errors, as: UTF8.self).contains(text) }) { return }
      if !process.isRunning { break }
      usleep(5_000)
    }
    throw ChildProcessError(message: "child did not print '\(text)': \(lock.withLock { String(decoding: errors, as: UTF8.self) })")
  }

  /// Waits for exit (killing it after `timeout` seconds).
  func finish(timeout: Double) throws -> (status: Int32, output: String, errors: String) {
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { usleep(5_000) }
    if process.isRunning {
      process.terminate()
      process.waitUntilExit()
    }
    process.waitUntilExit()
    // Drain what the pipes still hold.
    stdout.fileHandleForReading.readabilityHandler = nil
    stderr.fileHandleForReading.readabilityHandler = nil
    let rest = stdout.fileHandleForReading.readDataToEndOfFile()
    let restErrors = stderr.fileHandleForReading.readDataToEndOfFile()
    return lock.withLock {
      output.append(rest)
      errors.append(restErrors)
      return (process.terminationStatus, String(decoding: output, as: UTF8.self), String(decoding: errors, as: UTF8.self))
    }
  }
}

struct ChildProcessError: Error, CustomStringConvertible {
  let message: String
  var description: String { message }
}
