import Foundation

/// Everything one `groupsync-bench` run measured, as written to
/// bench/results.json. Times are microseconds unless a name says otherwise;
/// every `BenchStats` is {n, p50, p99, max, mean} over its samples.
struct BenchResults: Codable {
  var schema = "groupsync-bench/1"
  var quick: Bool
  var date: String
  var durationSeconds: Double = 0
  var machine: BenchMachine
  var settings: BenchSettings
  var latency: [BenchLatencyRow] = []
  var peers: BenchPeersResult?
  var hosts: BenchHostsResult?
  var fleet: BenchFleetResult?
  var scale: BenchScaleResult?
  var polling: BenchPollingResult?
  var capture: [BenchCaptureRow] = []
  var codec: [BenchCodecRow] = []
  var callgrind: BenchCallgrindResult?
  var throughput: BenchThroughputResult?
  var fanOut: BenchFanOutResult?
  var memory: BenchMemoryResult?
  var readLatency: BenchReadLatencyResult?
  var catchUp: BenchCatchUpResult?
  var contexts: BenchContextsResult?
  var targets: [BenchTarget] = []
  var notes: [String] = []
}

struct BenchMachine: Codable {
  var nproc: Int
  var cpuModel: String
  var kernel: String
  var sqliteVersion: String
  /// The git revision the engine was built from, where known.
  var engine: String
  var workFolder: String
  var filesystem: String
  var loadAverageStart: String
  var loadAverageEnd: String = ""
}

struct BenchSettings: Codable {
  var listenerCounts: [Int]
  var busyCommits: Int
  var sparseCommits: Int
  var sparseIntervalMs: Int
  var fanOutWrites: Int
  var fanOutListenerCounts: [Int]
  var idleWindowSeconds: Double
  var pollCommits: Int
  var captureTransactionsOneRow: Int
  var captureTransactionsThousandRows: Int
  var throughputSeconds: Double
  var throughputBacklogWindow: Int
  var bulkTransactions: Int
  var bulkRows: Int
  var memoryBacklogs: [Int]
  var callgrind: Bool
  /// GroupSync and the floor alternate in this many blocks per stream.
  var rounds: Int
  /// Reads in the writing process: listener processes, and reads per reader.
  var readLatencyListeners: Int
  var readLatencyReads: Int
  /// How listener processes receive: `watcher-thread`
  /// (Listener.startOnWatcherThread) or `events` (the AsyncSequence).
  var listenerForm: String = "watcher-thread"

  static let full = BenchSettings(
    listenerCounts: [1, 4, 16, 64], busyCommits: 2000, sparseCommits: 1000, sparseIntervalMs: 10,
    fanOutWrites: 1000, fanOutListenerCounts: [0, 1, 4, 16, 64], idleWindowSeconds: 5, pollCommits: 500,
    captureTransactionsOneRow: 4000, captureTransactionsThousandRows: 200, throughputSeconds: 3,
    throughputBacklogWindow: 64, bulkTransactions: 10, bulkRows: 10_000, memoryBacklogs: [10_000, 100_000],
    callgrind: true, rounds: 8, readLatencyListeners: 16, readLatencyReads: 5000)

  static let quick = BenchSettings(
    listenerCounts: [1, 4], busyCommits: 300, sparseCommits: 150, sparseIntervalMs: 10,
    fanOutWrites: 300, fanOutListenerCounts: [0, 1, 4], idleWindowSeconds: 2, pollCommits: 100,
    captureTransactionsOneRow: 600, captureTransactionsThousandRows: 30, throughputSeconds: 1,
    throughputBacklogWindow: 64, bulkTransactions: 3, bulkRows: 10_000, memoryBacklogs: [10_000],
    callgrind: false, rounds: 2, readLatencyListeners: 16, readLatencyReads: 600)
}

/// Delivery latency at the last of `listeners` listener processes, per
/// commit: max over listeners of (delivered − committed).
struct BenchLatencyRow: Codable {
  var listeners: Int
  var stream: String
  /// Whether GroupSync and the floor (link) ran in alternating blocks.
  var interleaved: Bool
  var groupsync: BenchStats
  var floorLink: BenchStats
  var floorRename: BenchStats
  /// GroupSync p50 / floor (link) p50, and the same for p99.
  var ratioP50: Double
  var ratioP99: Double
  /// The writer's `Store.write` wall time; the part of it after COMMIT
  /// returned (change set built and published); the floor's publish time.
  var groupsyncWrite: BenchStats
  var groupsyncPublish: BenchStats
  var floorLinkPublish: BenchStats
  /// CPU time of a listener process per change set delivered (getrusage),
  /// and of a floor watcher per message, µs.
  var groupsyncListenerCPUPerDelivery: Double
  var floorWatcherCPUPerMessage: Double
  var resets: Int
  var missing: Int
}

/// GroupSync beside PostgreSQL LISTEN/NOTIFY (Benchmarks/pgnotify.c), to
/// the last of N listener processes, in alternating blocks.
struct BenchPeersResult: Codable {
  struct Row: Codable {
    var listeners: Int
    var stream: String
    var groupsync: BenchStats
    var postgres: BenchStats?
    /// GroupSync over PostgreSQL, p50 and p99.
    var ratioP50: Double
    var ratioP99: Double
    var groupsyncListenerCPUPerDelivery: Double
    var postgresListenerCPUPerMessage: Double
  }

  var rows: [Row]
}

struct BenchPollingResult: Codable {
  struct Idle: Codable {
    var process: String
    var cpuMicrosPerSecond: Double
    var cpuPercentOfCore: Double
    /// utime + stime over the window, in clock ticks (1/100 s).
    var clockTicks: Int64
  }

  struct Detection: Codable {
    var reader: String
    var latency: BenchStats
  }

  var idleWindowSeconds: Double
  var idle: [Idle]
  var commitIntervalMs: String
  var detection: [Detection]
}

/// Wall time per transaction of the same rows written four ways, each on a
/// file of its own, in alternating blocks. Two pairs, each running the same
/// statement code with and without GroupSync.
struct BenchCaptureRow: Codable {
  var rows: Int
  var operation: String
  /// Raw SQLite: one C statement stepped per row, BEGIN IMMEDIATE / COMMIT.
  var plain: BenchStats
  /// `Store.write` stepping the same C statement.
  var groupsync: BenchStats
  /// groupsync p50 / plain p50 − 1: what GroupSync adds to raw SQLite.
  var overhead: Double
  /// Plain GRDB: `DatabasePool.write`, `db.cachedStatement(sql:)` executed
  /// with arguments per row.
  var grdb: BenchStats?
  /// `Store.write` running the same GRDB statements.
  var groupsyncGRDB: BenchStats?
  /// groupsyncGRDB p50 / grdb p50 − 1: what GroupSync adds to a GRDB write.
  var overheadOverGRDB: Double?
  /// grdb p50 / plain p50 − 1: what GRDB itself costs over raw SQLite.
  var grdbOverPlain: Double?
  var plainRowsPerSecond: Double
  var groupsyncRowsPerSecond: Double
}

/// `ChangeSetEncoding.encode` and `decode` of one table's inserted rows.
struct BenchCodecRow: Codable {
  var rows: Int
  var bytes: Int
  var encode: BenchStats
  var decode: BenchStats
}

struct BenchCallgrindResult: Codable {
  struct Row: Codable {
    var rows: Int
    var operation: String
    var transactions: Int
    /// Raw SQLite, and `Store.write` stepping the same C statement.
    var plainInstructionsPerRow: Double
    var groupsyncInstructionsPerRow: Double
    /// groupsync / plain − 1.
    var overhead: Double
    /// Plain GRDB (cached statements), and `Store.write` running the same
    /// GRDB statements.
    var grdbInstructionsPerRow: Double?
    var groupsyncGRDBInstructionsPerRow: Double?
    /// groupsyncGRDB / grdb − 1.
    var overheadOverGRDB: Double?
    /// grdb / plain − 1.
    var grdbOverPlain: Double?
    /// Plain GRDB with one no-op transaction observer: the part of the
    /// overhead over plain GRDB that GRDB charges any observer.
    var grdbObservedInstructionsPerRow: Double?
  }

  var skipped: String?
  var rows: [Row] = []
}

struct BenchThroughputResult: Codable {
  struct Sustained: Codable {
    var listeners: Int
    var backlogWindow: Int
    var changeSets: Int
    var seconds: Double
    var changeSetsPerSecond: Double
    var rowsPerSecond: Double
    var maxBacklog: Int64
    /// The floor's sustained rate to as many watchers under the same
    /// backlog window, measured right after (nil if it failed), and
    /// changeSetsPerSecond over it.
    var floorMessagesPerSecond: Double?
    var floorMaxBacklog: Int64?
    var ratioToFloor: Double?
  }

  struct OpenLoop: Codable {
    var listeners: Int
    var seconds: Double
    var writerChangeSetsPerSecond: Double
    var deliveredChangeSetsPerSecond: Double
    var backlogAtEnd: Int64
  }

  struct Bulk: Codable {
    var listeners: Int
    var transactions: Int
    var rowsPerTransaction: Int
    var rowsPerSecond: Double
    /// Commit → delivered at the last listener, per transaction.
    var latency: BenchStats
    /// The writer's `Store.write` wall time per transaction.
    var write: BenchStats
  }

  var sustained: Sustained
  var openLoop: OpenLoop
  var bulk: Bulk
}

struct BenchFanOutResult: Codable {
  struct Point: Codable {
    var listeners: Int
    /// `Store.write` wall time of a 1-row insert, listeners stopped (SIGSTOP).
    var write: BenchStats
    /// The floor writer's publish time (write + links) with as many stopped
    /// watchers, measured in alternating blocks with `write`.
    var floorPublish: BenchStats?
  }

  var points: [Point]
  /// Least-squares slope of p50 write time over listeners ≥ 1.
  var microsPerExtraListener: Double
  /// p50(1 listener) − p50(0 listeners): encoding and writing the file.
  var firstListenerMicros: Double
  /// The same slope for the floor's writer (one file, N links).
  var floorMicrosPerExtraListener: Double
}

struct BenchMemoryResult: Codable {
  struct Row: Codable {
    var backlog: Int
    var writeSeconds: Double
    var drainSeconds: Double
    var drainChangeSetsPerSecond: Double
    /// Peak RSS (VmHWM) after draining, in kB.
    var peakKB: Int64
    var rssAfterKB: Int64
    var resets: Int
  }

  var baselinePeakKB: Int64
  var rows: [Row]
}

struct BenchTarget: Codable {
  var target: String
  var figure: String
  /// nil: not assessed in this run.
  var met: Bool?
}
