import Foundation
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSync

#if canImport(Glibc)
import Glibc
#endif

/// `groupsync status --watch`: a live view redrawn in place in a real
/// terminal (tmux), frames one after another elsewhere.
@Suite(.serialized, .timed)
struct StatusWatchTests {
  static let hasTmux = FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux")

  @Test(.enabled(if: hasTmux)) func inATerminalItRedrawsInPlaceWithLagBarsAndQuitsOnQ() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    // A durable listener that stopped (its lag grows) and a live one.
    let late = try await ProcessHarness.startWatch([directory, "--name", "late", "--durable"])
    late.signal(SIGKILL)
    _ = try await ProcessHarness.finish(late, timeout: 10)
    let live = try await ProcessHarness.startWatch([directory, "--name", "live"])
    defer { _ = live.finish(timeout: 10) }

    let session = "gss\(getpid())"
    func tmux(_ arguments: [String]) throws -> String {
      let result = try ChildProcess.run("/usr/bin/tmux", arguments, timeout: 10)
      return result.stdout + result.stderr
    }
    func pane() throws -> String { try tmux(["capture-pane", "-p", "-t", session]) }
    func waitForPane(_ what: String, _ condition: (String) -> Bool) async throws -> String {
      let deadline = ContinuousClock.now + .seconds(15)
      var screen = try pane()
      while !condition(screen) && ContinuousClock.now < deadline {
        try await Task.sleep(for: .milliseconds(25))
        screen = try pane()
      }
      #expect(condition(screen), "\(what); pane: \(screen)")
      return screen
    }
    // tmux runs the command in its server's environment: pass on the
    // sanitizers' settings of `make test-asan` / `test-tsan`.
    let environment = ProcessInfo.processInfo.environment
      .filter { ["ASAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS"].contains($0.key) }
      .map { "export \($0.key)='\($0.value)'; " }.joined()
    let command = environment
      + "'\(CLI.executable)' status '\(directory)' --watch --interval 0.2; echo EXITED $?; sleep 30"
    _ = try tmux(["new-session", "-d", "-s", session, "-x", "120", "-y", "20", command])
    defer { _ = try? tmux(["kill-session", "-t", session]) }
    let lines = { (screen: String) in screen.split(separator: "\n").map(String.init) }
    let first = try await waitForPane("both listeners shown") { $0.contains("late") && $0.contains("live (pid") }
    let start = try #require(lines(first).first { $0.hasPrefix("main ") }?.split(separator: " ").dropFirst().first)

    _ = try await ProcessHarness.exec(directory, repeat: 5, ListenerFixture.insert)
    let after = "main   \(Int64(start)! + 5)"
    // The live listener catches up (a frame may show it one behind on a
    // busy machine); the stopped one stays five behind.
    let screen = try await waitForPane("the new sequence, the stopped listener's lag, the live one's none") { screen in
      screen.contains(after)
        && lines(screen).contains { $0.hasPrefix("late") && $0.split(separator: " ").contains("5") && $0.contains("[##########..........]") }
        && lines(screen).contains { $0.hasPrefix("live") && $0.contains("[....................]") }
    }
    #expect(screen.components(separatedBy: "STORE").count == 2, "redrawn in place, not appended: \(screen)")
    // A rate was measured between two frames.
    #expect(lines(screen).first { $0.hasPrefix("main ") }.map { !$0.contains("…") } == true, "\(screen)")
    _ = try tmux(["send-keys", "-t", session, "q"])
    _ = try await waitForPane("it quits on q") { $0.contains("EXITED 0") }
    live.signal(SIGTERM)
  }

  @Test func elsewhereItPrintsFramesOneAfterAnotherWithoutEscapes() async throws {
    let folder = try TemporaryFolder()
    let directory = try await ProcessHarness.initGroup(folder, schema: ListenerFixture.schema)
    let result = try await ProcessHarness.run(["status", directory, "--watch", "--interval", "0.1", "--updates", "3"])
    #expect(result.status == 0, "\(result.stderr)")
    #expect(result.stdout.components(separatedBy: "STORE").count == 4, "\(result.stdout)")
    #expect(!result.stdout.contains("\u{1B}"), "no escape sequences off a terminal")
    #expect(result.stdout.contains("no listeners"))
    let bad = try await ProcessHarness.run(["status", directory, "--watch", "--json"])
    #expect(bad.status != 0 && bad.stderr.contains("--json"), "\(bad.stderr)")
  }
}
