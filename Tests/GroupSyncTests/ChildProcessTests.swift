import Foundation
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The one child-process helper of the demo, the benchmark and the tests,
/// on small shell programs.
@Suite(.timed)
struct ChildProcessTests {
  @Test func linesSentOnStdinComeBackOneByOne() throws {
    let child = try ChildProcess(executable: "/bin/cat", arguments: [])
    child.send("first")
    #expect(try child.readLine(timeout: 10) == "first")
    child.send("second")
    child.send("third")
    #expect(try child.readLine(timeout: 10) == "second")
    #expect(try child.readLine(timeout: 10) == "third")
    let result = child.finish(timeout: 10)
    #expect(result.succeeded)
    #expect(result.stdout == "first\nsecond\nthird\n")
  }

  @Test func stdoutAndStderrAreKeptApart() throws {
    let result = try ChildProcess.run("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"], timeout: 10)
    #expect(result.status == 3 && !result.signalled && !result.succeeded)
    #expect(result.stdout == "out\n")
    #expect(result.stderr == "err\n")
  }

  @Test func environmentReplacesTheParents() throws {
    let result = try ChildProcess.run("/bin/sh", ["-c", "echo \"$GREETING\""], environment: ["GREETING": "hi"])
    #expect(result.stdout == "hi\n")
  }

  @Test func aLineThatDoesNotComeTimesOut() throws {
    let child = try ChildProcess(executable: "/bin/sleep", arguments: ["30"])
    #expect(throws: ChildProcessError.self) { try child.readLine(timeout: 0.2) }
    child.signal(SIGKILL)
    let result = child.finish(timeout: 10)
    #expect(result.signalled && result.status == SIGKILL)
  }

  @Test func readingPastTheEndSaysTheChildExited() throws {
    let child = try ChildProcess(executable: "/bin/sh", arguments: ["-c", "echo last; echo why >&2"])
    #expect(try child.readLine(timeout: 10) == "last")
    let error = #expect(throws: ChildProcessError.self) { try child.readLine(timeout: 10) }
    #expect(error?.description.contains("exited: why") == true)
  }

  @Test func waitsForStderrAndForLines() throws {
    let child = try ChildProcess(
      executable: "/bin/sh", arguments: ["-c", "echo ready >&2; echo a; echo b; read line; echo \"$line\""])
    try child.waitForStderr(containing: "ready", timeout: 10)
    try child.waitForLines(2, timeout: 10)
    child.send("c")
    try child.waitForLines(3, timeout: 10)
    #expect(child.finish(timeout: 10).stdout == "a\nb\nc\n")
  }

  @Test func aChildThatOutlivesItsTimeoutIsTerminated() throws {
    let child = try ChildProcess(executable: "/bin/sleep", arguments: ["30"])
    #expect(!child.waitForExit(timeout: 0.1))
    let result = child.finish(timeout: 0.1)
    #expect(result.timedOut && result.signalled && result.status == SIGTERM)
    #expect(!child.isRunning)
  }

  @Test func writingToAChildThatExitedIsHarmless() throws {
    let child = try ChildProcess(executable: "/bin/true", arguments: [])
    #expect(child.waitForExit(timeout: 10))
    child.send("nobody reads this")
    #expect(child.finish(timeout: 10).succeeded)
  }

  @Test func currentExecutableIsThisProcess() {
    let path = ChildProcess.currentExecutable
    #expect(path.hasPrefix("/") && FileManager.default.isExecutableFile(atPath: path))
  }
}
