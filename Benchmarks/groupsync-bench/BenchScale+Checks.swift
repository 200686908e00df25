// What the server's checks of a shipment cost (issue 41): gs_ship_5 (the
// caller's membership, the shipment's format, size and shape, the group's
// retention) against gs_ship_3 (none of them), side by side, with pgbench.
import Foundation
import GroupSyncProcess

extension BenchRunner {
  /// One shipment after another from one client (`seconds` per run, the
  /// two functions alternating, `rounds` runs each), of 1 and of 50 rows:
  /// the median time per call of each, and their difference.
  func scaleChecks(_ conninfo: String, relay: String, seconds: Int, rounds: Int) throws -> [BenchScaleResult.Checks] {
    let pgbench = try pgbenchPath()
    let folder = options.workFolder + "/scale/checks"
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    // The relay's objects, made by an administrator's act (the group's
    // settings, left as they are).
    let group = "bench-checks-\(getpid())"
    let configure = try ChildProcess.run(
      relay, ["--configure", "--group", group, "--postgres", conninfo, "--max-shipment-bytes", String(64 << 20)],
      timeout: 120)
    guard configure.succeeded else { throw BenchError("groupsync-relay --configure: \(configure.stderr.suffix(400))") }
    _ = try psql(
      conninfo,
      """
      CREATE SEQUENCE IF NOT EXISTS bench_checks_seq;
      INSERT INTO gs_clock(grp, store) VALUES ('\(group)', 'main') ON CONFLICT DO NOTHING;
      INSERT INTO gs_host(grp, store, host) VALUES ('\(group)', 'main', 'h') ON CONFLICT DO NOTHING
      """)
    defer {
      _ = try? psql(
        conninfo,
        """
        DELETE FROM gs_change WHERE grp = '\(group)'; DELETE FROM gs_row WHERE grp = '\(group)';
        DELETE FROM gs_host WHERE grp = '\(group)'; DELETE FROM gs_clock WHERE grp = '\(group)';
        DELETE FROM gs_group WHERE grp = '\(group)'; DROP SEQUENCE IF EXISTS bench_checks_seq
        """)
    }
    var checks: [BenchScaleResult.Checks] = []
    for rows in [1, 50] {
      let (body, arrays) = Self.checksShipment(rows: rows)
      // A base no image passes: every call ships (none is 'moved').
      let call = { (function: String, retention: String) in
        "SELECT outcome FROM \(function)('\(group)', 'main', 'h', nextval('bench_checks_seq'), '\(body)',\(retention) "
          + arrays + ", false, 1::smallint, NULL, NULL);\n"
      }
      try call("gs_ship_3", " NULL,").write(toFile: folder + "/ship3-\(rows).sql", atomically: true, encoding: .utf8)
      try call("gs_ship_5", "").write(toFile: folder + "/ship5-\(rows).sql", atomically: true, encoding: .utf8)
      var times: [String: [Double]] = ["3": [], "5": []]
      for _ in 0..<rounds {
        for function in ["3", "5"] {
          let run = try ChildProcess.run(
            pgbench, ["-n", "-c", "1", "-T", String(seconds), "-f", folder + "/ship\(function)-\(rows).sql", conninfo],
            timeout: Double(seconds) + 60)
          guard run.succeeded else { throw BenchError("pgbench gs_ship_\(function): \(run.stderr.suffix(400))") }
          // "latency average = 0.352 ms"
          guard let line = run.stdout.split(separator: "\n").first(where: { $0.hasPrefix("latency average = ") }),
            let ms = line.split(separator: " ").dropFirst(3).first.flatMap({ Double($0) })
          else { throw BenchError("pgbench printed no latency: \(run.stdout.suffix(300))") }
          times[function]?.append(ms * 1000)
        }
      }
      let median = { (values: [Double]) in values.sorted()[values.count / 2] }
      let result = BenchScaleResult.Checks(
        rows: rows, rounds: rounds, seconds: Double(seconds), ship3Micros: median(times["3"]!),
        ship5Micros: median(times["5"]!))
      log(String(format: "scale: the checks, %d row(s): gs_ship_3 %.0f us, gs_ship_5 %.0f us a call (+%.0f us, %.2fx)",
                 rows, result.ship3Micros, result.ship5Micros, result.ship5Micros - result.ship3Micros,
                 result.ship5Micros / result.ship3Micros))
      checks.append(result)
    }
    return checks
  }

  /// A shipment of `rows` rows of a five-column table in format 1, as a
  /// relay writes it: its body, and the call's array arguments from the
  /// images on (literals).
  private static func checksShipment(rows: Int) -> (body: String, arrays: String) {
    let values = #"[{"t":"a title"},{"t":"some body text"},{"i":42},{"r":2.5},null]"#
    let rowImages = (1...rows).map { #"{"g":"g\#($0)","i":\#($0),"b":0,"v":\#(values)}"# }
    let body = #"{"t":[{"n":"note","k":["title","body","n","x","b"],"s":false,"r":["#
      + rowImages.joined(separator: ",") + #"]}],"c":[]}"#
    func array(_ items: [String]) -> String {
      "ARRAY[" + items.map { "'" + $0.replacingOccurrences(of: "'", with: "''") + "'" }.joined(separator: ",") + "]"
    }
    let gids = (1...rows).map { "g\($0)" }
    let arrays = [
      array(Array(repeating: "note", count: rows)), array(gids),
      "ARRAY[" + Array(repeating: "9000000000000000000", count: rows).joined(separator: ",") + "]::bigint[]",
      array(Array(repeating: #"["title","body","n","x","b"]"#, count: rows)),
      array(Array(repeating: values, count: rows)),
      "'{}'", "'{}'", "'{}'", "'{}'", "'{}'", "'{}'",
    ].joined(separator: ", ")
    return (body.replacingOccurrences(of: "'", with: "''"), arrays)
  }
}
