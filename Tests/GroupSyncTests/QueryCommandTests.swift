import Foundation
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `groupsync query`, once and `--live`, as a real process; in a terminal
/// through tmux.
@Suite(.serialized, .timed)
struct QueryCommandTests {
  static let sql = "SELECT id, v FROM t ORDER BY id"

  static func makeGroup(_ folder: TemporaryFolder) throws -> String {
    let directory = folder.child("group")
    let made = try CLI.run(["init", directory])
    #expect(made.status == 0, "\(made.stderr)")
    let filled = try CLI.run(["exec", directory, "CREATE TABLE t(id INTEGER PRIMARY KEY, v)", "INSERT INTO t VALUES (1, 'a'), (2, 'b')"])
    #expect(filled.status == 0, "\(filled.stderr)")
    return directory
  }

  @Test func liveMarksRowsThatAppearChangeAndVanish() throws {
    let folder = try TemporaryFolder()
    let directory = try Self.makeGroup(folder)
    let live = try CLI.start(["query", directory, Self.sql, "--live", "--updates", "2"])
    try live.waitForLines(4)  // header, two rows, summary
    _ = try CLI.run(["exec", directory, "UPDATE t SET v = 'B' WHERE id = 2", "INSERT INTO t VALUES (3, 'c')"])
    // Drawn before the next commit: an update runs the query on the store
    // as it is then, so a commit that came first would show in it already.
    try live.waitForLines(9)  // and header, three rows, summary
    _ = try CLI.run(["exec", directory, "CREATE TABLE unrelated(x)"])  // touches no table the query reads
    _ = try CLI.run(["exec", directory, "DELETE FROM t WHERE id = 1"])
    let result = live.finish(timeout: 30)
    #expect(result.status == 0, "\(result.stderr)")
    let lines = result.stdout.split(separator: "\n").map { $0.replacingOccurrences(of: " ", with: "") }
    #expect(lines.contains("~|2|B") && lines.contains("+|3|c") && lines.contains("-|1|a"), "\(result.stdout)")
    #expect(lines.filter { $0.hasPrefix("#") }.count == 2, "one update per change set that touched t: \(result.stdout)")
  }

  @Test(arguments: [SIGTERM, SIGINT])
  func liveExitsCleanlyOnASignal(_ signalNumber: Int32) throws {
    let folder = try TemporaryFolder("query\(signalNumber)")
    let directory = try Self.makeGroup(folder)
    let live = try CLI.start(["query", directory, Self.sql, "--live"])
    try live.waitForLines(4)
    live.signal(signalNumber)
    let result = live.finish(timeout: 10)
    #expect(!result.signalled && result.status == 0, "\(result.stderr)")
    #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/listeners").isEmpty)
  }

  @Test func onlyAQueryIsAccepted() throws {
    let folder = try TemporaryFolder()
    let directory = try Self.makeGroup(folder)
    let result = try CLI.run(["query", directory, "DELETE FROM t"])
    #expect(result.status != 0)
    #expect(result.stderr.contains("only a query"), "\(result.stderr)")
    #expect(try CLI.run(["query", directory, "SELECT count(*) FROM t"]).stdout.contains("| 2"), "nothing was deleted")
    let bad = try CLI.run(["query", directory, "SELECT nope FROM t"])
    #expect(bad.status != 0 && bad.stderr.contains("nope"), "\(bad.stderr)")
  }

  static let hasTmux = FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux")

  /// The live table redrawn in a real terminal, and q quits.
  @Test(.enabled(if: hasTmux)) func liveInATerminalRedrawsAndQuitsOnQ() throws {
    let folder = try TemporaryFolder()
    let directory = try Self.makeGroup(folder)
    let session = "gsq\(getpid())"
    func tmux(_ arguments: [String]) throws -> String {
      let result = try ChildProcess.run("/usr/bin/tmux", arguments, timeout: 10)
      return result.stdout + result.stderr
    }
    func pane() throws -> String { try tmux(["capture-pane", "-p", "-t", session]) }
    func waitForPane(_ text: String) throws {
      var screen = try pane()
      for _ in 0..<400 where !screen.contains(text) {
        usleep(25_000)
        screen = try pane()
      }
      #expect(screen.contains(text), "pane: \(screen)")
    }
    // tmux runs the command in its server's environment: pass on the
    // sanitizers' settings of `make test-asan` / `test-tsan`.
    let environment = ProcessInfo.processInfo.environment
      .filter { ["ASAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS"].contains($0.key) }
      .map { "export \($0.key)='\($0.value)'; " }.joined()
    let command = environment + "'\(CLI.executable)' query '\(directory)' '\(Self.sql)' --live; echo EXITED $?; sleep 30"
    _ = try tmux(["new-session", "-d", "-s", session, "-x", "100", "-y", "20", command])
    defer { _ = try? tmux(["kill-session", "-t", session]) }
    try waitForPane("2 rows")
    _ = try CLI.run(["exec", directory, "UPDATE t SET v = 'changed' WHERE id = 1"])
    try waitForPane("+0 ~1 -0")
    let screen = try pane()
    #expect(screen.components(separatedBy: "| id").count == 2, "redrawn in place, not appended: \(screen)")
    #expect(screen.contains("~ | 1  | changed"), "\(screen)")
    _ = try tmux(["send-keys", "-t", session, "q"])
    try waitForPane("EXITED 0")
  }
}
