import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process of the benchmark driven line by line: commands on its
/// stdin, one JSON object per line back on its stdout; stderr is kept for
/// error reports.
final class BenchChild: @unchecked Sendable {
  let name: String
  private let process = Process()
  private let input = Pipe()
  private let output = Pipe()
  private let errors = Pipe()
  private let condition = NSCondition()
  private var pending = Data()
  private var lines: [String] = []
  private var errorText = Data()
  private var ended = false

  init(name: String, executable: String, arguments: [String], environment: [String: String]? = nil) throws {
    self.name = name
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    process.standardInput = input
    process.standardOutput = output
    process.standardError = errors
    output.fileHandleForReading.readabilityHandler = { [weak self] handle in
      self?.received(handle.availableData)
    }
    errors.fileHandleForReading.readabilityHandler = { [weak self] handle in
      let data = handle.availableData
      guard let self else { return }
      self.condition.lock()
      self.errorText.append(data)
      self.condition.unlock()
    }
    try process.run()
  }

  var pid: Int32 { process.processIdentifier }
  var isRunning: Bool { process.isRunning }

  var stderrText: String {
    condition.lock()
    defer { condition.unlock() }
    return String(decoding: errorText, as: UTF8.self)
  }

  private func received(_ data: Data) {
    condition.lock()
    defer { condition.unlock() }
    if data.isEmpty {
      ended = true
    } else {
      pending.append(data)
      while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
        lines.append(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
        pending.removeSubrange(pending.startIndex...newline)
      }
    }
    condition.broadcast()
  }

  /// Sends one command line.
  func send(_ line: String) {
    try? input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
  }

  /// The next line the child printed, waiting up to `timeout` seconds.
  func readLine(timeout: Double) throws -> String {
    let deadline = Date().addingTimeInterval(timeout)
    condition.lock()
    defer { condition.unlock() }
    while lines.isEmpty {
      if ended || !process.isRunning && lines.isEmpty && pending.isEmpty {
        // Give the pipe a moment to deliver what the child wrote last.
        if !condition.wait(until: Date().addingTimeInterval(0.2)) && lines.isEmpty {
          throw BenchError("\(name) exited: \(String(decoding: errorText, as: UTF8.self).suffix(2000))")
        }
        continue
      }
      if !condition.wait(until: deadline) && lines.isEmpty {
        throw BenchError("\(name) did not answer within \(Int(timeout)) s: \(String(decoding: errorText, as: UTF8.self).suffix(2000))")
      }
    }
    return lines.removeFirst()
  }

  /// Reads one line and decodes it.
  func read<T: Decodable>(_ type: T.Type, timeout: Double) throws -> T {
    let line = try readLine(timeout: timeout)
    do {
      return try JSONDecoder().decode(T.self, from: Data(line.utf8))
    } catch {
      throw BenchError("\(name) sent an unreadable line (\(error)): \(line.prefix(300))")
    }
  }

  func suspend() { kill(pid, SIGSTOP) }
  func resume() { kill(pid, SIGCONT) }

  /// Asks the child to quit, waits up to `timeout` seconds, then kills it.
  func quit(timeout: Double = 10) {
    guard process.isRunning else { return }
    resume()
    send("quit")
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { usleep(2_000) }
    if process.isRunning {
      process.terminate()
      usleep(100_000)
      if process.isRunning { kill(pid, SIGKILL) }
    }
    process.waitUntilExit()
    output.fileHandleForReading.readabilityHandler = nil
    errors.fileHandleForReading.readabilityHandler = nil
    try? input.fileHandleForWriting.close()
  }
}

/// The path of this very executable, to start the hidden subcommands.
func benchExecutablePath() -> String {
  var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
  let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
  if count > 0 {
    return buffer.withUnsafeBufferPointer { String(decoding: $0.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self) }
  }
  return URL(fileURLWithPath: CommandLine.arguments[0]).path
}

/// Runs a program to the end and returns its status and output.
func benchRun(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
              timeout: Double = 300) throws -> (status: Int32, output: String, errors: String)
{
  let process = Process()
  process.executableURL = URL(fileURLWithPath: executable)
  process.arguments = arguments
  if let environment { process.environment = environment }
  let output = Pipe()
  let errors = Pipe()
  process.standardOutput = output
  process.standardError = errors
  let outData = BenchBox(Data())
  let errData = BenchBox(Data())
  output.fileHandleForReading.readabilityHandler = { handle in
    let data = handle.availableData
    outData.withLock { $0.append(data) }
  }
  errors.fileHandleForReading.readabilityHandler = { handle in
    let data = handle.availableData
    errData.withLock { $0.append(data) }
  }
  try process.run()
  let deadline = Date().addingTimeInterval(timeout)
  while process.isRunning && Date() < deadline { usleep(5_000) }
  if process.isRunning {
    process.terminate()
    process.waitUntilExit()
    throw BenchError("\(executable) timed out after \(Int(timeout)) s")
  }
  process.waitUntilExit()
  output.fileHandleForReading.readabilityHandler = nil
  errors.fileHandleForReading.readabilityHandler = nil
  let restOut = output.fileHandleForReading.readDataToEndOfFile()
  let restErr = errors.fileHandleForReading.readDataToEndOfFile()
  let out = outData.withLock { $0.append(restOut); return $0 }
  let err = errData.withLock { $0.append(restErr); return $0 }
  return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
}
