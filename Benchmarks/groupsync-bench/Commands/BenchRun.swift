import ArgumentParser
import Foundation

/// `groupsync-bench run`: latency, throughput and overhead, each beside the
/// baseline a user would compare it with, measured in the same run.
struct BenchRun: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "run",
    abstract: "Benchmark GroupSync against the floor (inotify + files), polling, and plain SQLite.",
    discussion: """
      Prints a table and writes every figure as JSON. Needs the floor program \
      (Benchmarks/floor.c, built by `make bench`). Every figure is a median and p99 over many \
      samples; every claim is a ratio to a baseline measured in the same run.
      """)

  @Flag(name: .long, help: "Fewer samples and listener counts (under a minute): checks that the benchmark works.")
  var quick = false

  @Option(name: .long, help: "Where to write the JSON results.")
  var output: String?

  @Option(name: .long, help: "The floor program (cc -O2 Benchmarks/floor.c).")
  var floor = "bench/out/floor"

  @Option(name: .long, help: "The LD_PRELOAD shim that lets valgrind run Swift programs (Benchmarks/vgshim.c).")
  var valgrindShim = "bench/out/vgshim.so"

  @Flag(name: .long, help: "Skip the callgrind instruction counts.")
  var noCallgrind = false

  @Option(name: .long, help: "Where to create the run's scratch folder (default: the temporary directory).")
  var workFolder: String?

  @Flag(name: .long, help: "Keep the scratch folder.")
  var keep = false

  @Option(name: .long, help: "Only these phases, comma-separated: capture, latency, peers, hosts, fleet, scale, polling, memory, reads, catch-up, contexts.")
  var phases: String?

  @Option(name: .long, help: "Listener counts for the latency and peers phases, comma-separated (e.g. 1,4,16).")
  var listenerCounts: String?

  @Option(name: .long, help: "How listener processes receive: watcher-thread (Listener.startOnWatcherThread, the default) or events (the AsyncSequence).")
  var listenerForm: String?

  @Option(name: .long, help: "The PostgreSQL LISTEN/NOTIFY peer program (cc Benchmarks/pgnotify.c -lpq).")
  var pgnotify: String?

  @Option(name: .long, help: "libpq connection string of the PostgreSQL server for the peers phase (make bench-peers starts one).")
  var postgresConninfo: String?

  func run() async throws {
    let parent = workFolder.map(absolute) ?? FileManager.default.temporaryDirectory.path
    let folder = parent + "/groupsync-bench-\(UUID().uuidString.prefix(8))"
    if keep { FileHandle.standardError.write(Data("bench: scratch folder \(folder)\n".utf8)) }
    let runner = try BenchRunner(
      options: .init(
        quick: quick, workFolder: folder, floorPath: absolute(floor), valgrindShim: absolute(valgrindShim),
        callgrind: !noCallgrind,
        phases: phases.map { Set($0.split(separator: ",").map { String($0) }) },
        listenerCounts: try listenerCounts.map { list in
          try list.split(separator: ",").map { guard let count = Int($0), count > 0 else { throw ValidationError("bad listener count '\($0)'") }; return count }
        },
        listenerForm: try listenerForm.map { form in
          guard BenchListener.Form(rawValue: form) != nil else {
            throw ValidationError("--listener-form must be watcher-thread or events, not '\(form)'")
          }
          return form
        },
        pgnotify: pgnotify.map(absolute), postgresConninfo: postgresConninfo,
        log: { FileHandle.standardError.write(Data("bench: \($0)\n".utf8)) }))
    defer { if !keep { Self.remove(folder) } }
    let results = try runner.run()
    print(BenchTable.render(results))
    if let output {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
      encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
      var data = try encoder.encode(results)
      data.append(UInt8(ascii: "\n"))
      try data.write(to: URL(fileURLWithPath: output))
      print("wrote \(output)")
    }
    if runner.failures > 0 {
      BenchCommand.printError("\(runner.failures) benchmark phase(s) failed; see the notes above")
      throw ExitCode.failure
    }
  }

  /// Removes the scratch folder; children that are still closing may
  /// remove entries at the same time, so a failure is retried.
  static func remove(_ folder: String) {
    var lastError: Error?
    for _ in 0..<5 {
      do {
        try FileManager.default.removeItem(atPath: folder)
        return
      } catch {
        if !FileManager.default.fileExists(atPath: folder) { return }
        lastError = error
        usleep(300_000)
      }
    }
    BenchCommand.printError("cannot remove the scratch folder \(folder): \(lastError.map { "\($0)" } ?? "?")")
  }

  private func absolute(_ path: String) -> String {
    path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
  }
}
