// The capture's cost: overhead per commit, the codec, and instructions
// per row under callgrind.
import CGroupSync
import Foundation
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

extension BenchRunner {
  // MARK: 4. Capture overhead

  /// The same rows written four ways, each on a file of its own: raw
  /// SQLite and `Store.write` stepping the same C statement; plain GRDB and
  /// `Store.write` running the same GRDB cached statements.
  func captureOverhead() throws {
    log("capture overhead: raw SQLite, plain GRDB, and Store.write on each one's statements; no listeners")
    let folder = options.workFolder + "/capture"
    let plain = try BenchPlainWriter(path: folder + "-plain.sqlite")
    // No COMMIT stamps: the baselines pay no per-transaction observer.
    let group = try BenchGroupWriter(path: folder + "-group", stampsCommit: false)
    let grdb = try BenchGRDBWriter(path: folder + "-grdb.sqlite")
    let groupGRDB = try BenchGroupWriter(path: folder + "-group-grdb", grdbStatements: true, stampsCommit: false)
    let writers: [(BenchWorkload.Operation, Int) throws -> Int64] = [
      { try plain.transaction(rows: $1, $0) }, { try group.transaction(rows: $1, $0) },
      { try grdb.transaction(rows: $1, $0) }, { try groupGRDB.transaction(rows: $1, $0) },
    ]
    for writer in writers { _ = try writer(.insert, BenchWorkload.updateRows) }
    for rows in [1, 1000] {
      let total = rows == 1 ? settings.captureTransactionsOneRow : settings.captureTransactionsThousandRows
      let block = rows == 1 ? 50 : 5
      for operation in BenchWorkload.Operation.allCases {
        // Warm up every writer, then alternate blocks so that drift hits all alike.
        for _ in 0..<3 { for writer in writers { _ = try writer(operation, rows) } }
        var times = [[Int64]](repeating: [], count: writers.count)
        while times[0].count < total {
          for (index, writer) in writers.enumerated() {
            for _ in 0..<block { times[index].append(try writer(operation, rows)) }
          }
        }
        let stats = times.map { BenchStats(nanoseconds: $0) }
        results.capture.append(
          BenchCaptureRow(
            rows: rows, operation: operation.rawValue, plain: stats[0], groupsync: stats[1],
            overhead: stats[1].p50 / stats[0].p50 - 1, grdb: stats[2], groupsyncGRDB: stats[3],
            overheadOverGRDB: stats[3].p50 / stats[2].p50 - 1, grdbOverPlain: stats[2].p50 / stats[0].p50 - 1,
            plainRowsPerSecond: Double(rows) / stats[0].p50 * 1e6,
            groupsyncRowsPerSecond: Double(rows) / stats[1].p50 * 1e6))
      }
    }
  }

  // MARK: 4a. Encoding and decoding change sets

  func codec() throws {
    log("codec: ChangeSetEncoding.encode / decode")
    let store = UUID()
    for (rows, repeats) in [(1, options.quick ? 500 : 3000), (1000, options.quick ? 50 : 300), (10_000, options.quick ? 5 : 30)] {
      let changeSet = ChangeSet(
        storeID: store, sequence: 1_000_000, committedAtNanoseconds: BenchClock.realtime(), writerProcessID: getpid(),
        tables: ["items": TableChanges(inserted: (1...Int64(rows)).map { $0 + 5_000_000 })], invalidatedTableNames: [])
      var encodeTimes: [Int64] = []
      var decodeTimes: [Int64] = []
      var bytes: [UInt8] = []
      for _ in 0..<repeats {
        var start = BenchClock.monotonic()
        bytes = ChangeSetEncoding.encode(changeSet)
        encodeTimes.append(BenchClock.monotonic() - start)
        start = BenchClock.monotonic()
        let decoded = try ChangeSetEncoding.decode(bytes)
        decodeTimes.append(BenchClock.monotonic() - start)
        guard decoded.rowCount == rows else { throw BenchError("decode lost rows") }
      }
      results.codec.append(
        BenchCodecRow(rows: rows, bytes: bytes.count, encode: BenchStats(nanoseconds: encodeTimes),
                      decode: BenchStats(nanoseconds: decodeTimes)))
    }
  }

  // MARK: 4b. Instructions per row under callgrind

  func callgrind() {
    guard let valgrind = Self.which("valgrind") else {
      results.callgrind = BenchCallgrindResult(skipped: "valgrind not installed")
      return
    }
    guard let shim = options.valgrindShim, FileManager.default.fileExists(atPath: shim) else {
      results.callgrind = BenchCallgrindResult(skipped: "bench/out/vgshim.so missing (make bench builds it)")
      return
    }
    log("callgrind: instructions per row, raw SQLite and plain GRDB vs GroupSync (takes a few minutes)")
    // valgrind 3.19 cannot read the Swift toolchain's debug info: strip it.
    let binary = options.workFolder + "/groupsync-nodebug"
    if let objcopy = Self.which("objcopy"),
      (try? ChildProcess.run(objcopy, ["--strip-debug", executable, binary]))?.succeeded == true
    {
    } else {
      results.callgrind = BenchCallgrindResult(skipped: "objcopy failed; cannot strip debug info for valgrind")
      return
    }
    struct Job {
      var rows: Int
      var operation: BenchWorkload.Operation
      var mode: BenchCapture.Mode
      var transactions: Int
    }
    var jobs: [Job] = []
    for (rows, measured) in [(1000, 10), (1, 400)] {
      for operation in BenchWorkload.Operation.allCases {
        for mode in BenchCapture.Mode.allCases {
          for transactions in [measured, 0] { jobs.append(Job(rows: rows, operation: operation, mode: mode, transactions: transactions)) }
        }
      }
    }
    var environment = ProcessInfo.processInfo.environment
    // libdispatch passes a read-only mask to sigsuspend, which valgrind
    // 3.19 writes to; the shim hands it a copy. Deterministic hashing keeps
    // Swift's dictionaries from varying between runs.
    environment["LD_PRELOAD"] = shim
    environment["SWIFT_DETERMINISTIC_HASHING"] = "1"
    let totalsBox = BenchBox([Double](repeating: .nan, count: jobs.count))
    let errors = BenchBox<[String]>([])
    let folder = options.workFolder
    let env = environment
    let jobList = jobs
    let binaryPath = binary
    DispatchQueue.concurrentPerform(iterations: jobs.count) { index in
      let job = jobList[index]
      let tag = "cg-\(index)-\(job.mode.rawValue)-\(job.operation.rawValue)-\(job.rows)-\(job.transactions)"
      let out = "\(folder)/\(tag).out"
      do {
        let run = try ChildProcess.run(
          valgrind,
          ["--tool=callgrind", "--callgrind-out-file=\(out)", binaryPath, "capture", "--mode", job.mode.rawValue,
           "--op", job.operation.rawValue, "--rows", String(job.rows), "--transactions", String(job.transactions),
           "--directory", "\(folder)/\(tag)"],
          environment: env, timeout: 600)
        guard run.succeeded, let text = BenchProc.read(out),
          let line = text.split(separator: "\n").last(where: { $0.hasPrefix("totals:") || $0.hasPrefix("summary:") }),
          let value = Double(line.split(separator: " ").last ?? "")
        else {
          let status = run.timedOut ? "timed out" : "status \(run.status)"
          errors.withLock { $0.append("\(tag): \(status): \(run.stderr.suffix(400))") }
          return
        }
        totalsBox.withLock { $0[index] = value }
      } catch {
        errors.withLock { $0.append("\(tag): \(error)") }
      }
    }
    let totals = totalsBox.withLock { $0 }
    var result = BenchCallgrindResult()
    if let first = errors.withLock({ $0.first }) {
      result.skipped = "callgrind failed: \(first)"
    }
    func total(_ rows: Int, _ operation: BenchWorkload.Operation, _ mode: BenchCapture.Mode) -> (Double, Int) {
      let measured = jobs.indices.first {
        jobs[$0].rows == rows && jobs[$0].operation == operation && jobs[$0].mode == mode && jobs[$0].transactions > 0
      }!
      let baseline = jobs.indices.first {
        jobs[$0].rows == rows && jobs[$0].operation == operation && jobs[$0].mode == mode && jobs[$0].transactions == 0
      }!
      return (totals[measured] - totals[baseline], jobs[measured].transactions)
    }
    for rows in [1000, 1] {
      for operation in BenchWorkload.Operation.allCases {
        let (plain, transactions) = total(rows, operation, .plain)
        let (group, _) = total(rows, operation, .groupsync)
        let (grdb, _) = total(rows, operation, .grdb)
        let (groupGRDB, _) = total(rows, operation, .groupsyncGRDB)
        let (observed, _) = total(rows, operation, .grdbObserved)
        let count = Double(rows * transactions)
        result.rows.append(
          .init(
            rows: rows, operation: operation.rawValue, transactions: transactions,
            plainInstructionsPerRow: plain / count, groupsyncInstructionsPerRow: group / count,
            overhead: group / plain - 1, grdbInstructionsPerRow: grdb / count,
            groupsyncGRDBInstructionsPerRow: groupGRDB / count, overheadOverGRDB: groupGRDB / grdb - 1,
            grdbOverPlain: grdb / plain - 1, grdbObservedInstructionsPerRow: observed / count))
      }
    }
    results.callgrind = result
  }
}
