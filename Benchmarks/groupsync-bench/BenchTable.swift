import Foundation

/// The readable table `groupsync-bench` prints.
enum BenchTable {
  static func render(_ r: BenchResults) -> String {
    var out: [String] = []
    func line(_ text: String = "") { out.append(text) }
    func row(_ cells: [(String, Int)]) {
      line(cells.map { BenchFormat.pad($0.0, $0.1) }.joined().trimmingCharacters(in: .whitespaces))
    }

    let m = r.machine
    line("GroupSync benchmark\(r.quick ? " (quick run: fewer samples)" : "") - \(r.date), \(String(format: "%.0f", r.durationSeconds)) s")
    line("machine: \(m.cpuModel), nproc \(m.nproc), \(m.kernel), SQLite \(m.sqliteVersion); engine \(m.engine)")
    line("load average \(m.loadAverageStart) at start, \(m.loadAverageEnd) at end; work folder on \(m.filesystem)")
    line("Figures are p50 / p99 / max in microseconds over n samples; ratios are to a baseline measured in this run.")

    line()
    line("1-2. Delivery latency: writer's COMMIT returned -> change set handed to the consumer (\(r.settings.listenerForm == "events" ? "listener.events" : "Listener.startOnWatcherThread")), at the last of N")
    line("     listener processes; floor = Benchmarks/floor.c (200-byte file linked / renamed into N inotify-watched folders).")
    line("     busy = bursts of back-to-back commits (includes queueing); sparse = one commit every \(r.settings.sparseIntervalMs) ms.")
    line("     GroupSync and floor link alternate in \(r.settings.rounds) blocks per stream (* = floor ran before the listeners")
    line("     instead: N listeners + N watchers would pass 128 inotify instances); floor rename runs after them.")
    row([("N", 4), ("stream", 8), ("n", 6), ("GroupSync", 22), ("floor link", 22), ("floor rename", 22), ("p50 ratio", 10), ("p99 ratio", 10), ("publish p50 GS/floor", 21), ("CPU/msg GS/floor", 16)])
    for l in r.latency {
      row([(String(l.listeners) + (l.interleaved ? "" : "*"), 4), (l.stream, 8), (String(l.groupsync.n), 6), (l.groupsync.text, 22), (l.floorLink.text, 22),
           (l.floorRename.text, 22), (BenchFormat.ratio(l.ratioP50), 10), (BenchFormat.ratio(l.ratioP99), 10),
           ("\(BenchFormat.us(l.groupsyncPublish.p50)) / \(BenchFormat.us(l.floorLinkPublish.p50))", 21),
           ("\(BenchFormat.us(l.groupsyncListenerCPUPerDelivery)) / \(BenchFormat.us(l.floorWatcherCPUPerMessage))", 16)])
      if l.resets > 0 || l.missing > 0 { line("     ! N=\(l.listeners) \(l.stream): \(l.resets) resets, \(l.missing) commits not delivered to every listener") }
    }
    line("     publish = writer's time from COMMIT returned to Store.write returned (change set built, file written, linked")
    line("     into every inbox) / the floor's write + links; the rest of the latency is the listener's side.")
    line("     CPU/msg = CPU time (getrusage) of one listener process per change set / of one floor watcher per message.")

    if let peers = r.peers {
      line()
      line("2b. Peers: PostgreSQL LISTEN/NOTIFY (Benchmarks/pgnotify.c, libpq, a throw-away server on a unix socket),")
      line("    sparse stream, to the last of N listener processes, in \(r.settings.rounds) alternating blocks with GroupSync;")
      line("    from the writer asking to commit (GroupSync: the change set's committedAt, before the history row and COMMIT;")
      line("    PostgreSQL: before COMMIT is sent, since it signals its listeners before COMMIT returns) to the last listener.")
      row([("N", 4), ("stream", 8), ("n", 6), ("GroupSync", 22), ("PostgreSQL NOTIFY", 22), ("p50 ratio", 10), ("p99 ratio", 10), ("CPU/msg GS/PG", 16)])
      for p in peers.rows {
        row([(String(p.listeners), 4), (p.stream, 8), (String(p.groupsync.n), 6), (p.groupsync.text, 22), (p.postgres?.text ?? "-", 22),
             (BenchFormat.ratio(p.ratioP50), 10), (BenchFormat.ratio(p.ratioP99), 10),
             ("\(BenchFormat.us(p.groupsyncListenerCPUPerDelivery)) / \(BenchFormat.us(p.postgresListenerCPUPerMessage))", 16)])
      }
    }

    if let h = r.hosts {
      line()
      line("2c. Hosts: a commit on host A to a listener on host B, through A's relay, PostgreSQL and B's relay (each host a")
      line("    group folder with its own groupsync-relay process); sparse commits (5 ms apart), from A asking to commit")
      row([("path", 34), ("n", 6), ("p50 / p99 / max", 30)])
      row([("A → B (relays)", 34), (String(h.latency.n), 6), (h.latency.text, 30)])
      if let notify = h.notify { row([("PostgreSQL NOTIFY alone", 34), (String(notify.n), 6), (notify.text, 30)]) }
      if let terms = h.terms {
        row([("L: local delivery (N=1)", 34), (String(terms.localDelivery.n), 6), (terms.localDelivery.text, 30)])
        row([("W: one-row write, 1 listener", 34), (String(terms.write.n), 6), (terms.write.text, 30)])
        if let sparse = terms.sparseWrite {
          row([("   the same write 5 ms apart", 34), (String(sparse.n), 6), (sparse.text, 30)])
        }
        if let ship = terms.ship { row([("S: server's part (pgnotify --ship)", 34), (String(ship.n), 6), (ship.text, 30)]) }
        line("    R_1 \(Int(terms.rateWithListener)) one-row commits/s with one listener, R_w \(Int(terms.rateWithDoorbell))/s "
          + "with a relay's doorbell (both stopped); c_L \(terms.listenerCPUPerChangeSet.map(BenchFormat.us) ?? "-") us per change set")
      }
      if let target = h.targetP50, let targetP99 = h.targetP99 {
        line("    target: A → B p50 <= 2·L + S + 2·W + 0.3 ms = \(BenchFormat.us(target)): "
          + (h.latency.p50 <= target ? "met" : "NOT met") + "; p99 <= 2·L99 + S99 + 2·W99 + 1 ms = "
          + "\(BenchFormat.us(targetP99)): " + (h.latency.p99 <= targetP99 ? "met" : "NOT met"))
      }
      if let shipping = h.shippingCPUPerEntry, let applying = h.applyingCPUPerEntry {
        line("    relay CPU (sparse): A \(BenchFormat.us(shipping)) us per entry shipped, B \(BenchFormat.us(applying)) us per entry applied")
      }
      func budget(_ title: String, _ trace: BenchHostsTrace) {
        line("    \(title) (\(trace.samples) commits; p50 since A's write was asked / since the step before, us):")
        for step in trace.steps {
          row([("      " + step.name, 40), (BenchFormat.us(step.sinceCommit), 10), (BenchFormat.us(step.sinceStepBefore), 10)])
        }
      }
      if let trace = h.trace { budget("the budget, from the relays' traces", trace) }
      if let inProcess = h.inProcess {
        line("    A's relay in A's writing process (Relay.start(in:)): A → B \(inProcess.text) (p50 / p99 / max)"
          + (h.inProcessTargetP50.map { "; target p50 <= L + S + 2·W + 0.3 ms = \(BenchFormat.us($0)): " + (inProcess.p50 <= $0 ? "met" : "NOT met") } ?? ""))
        if let trace = h.inProcessTrace { budget("its budget", trace) }
      }
      if let fsync = h.fsyncOn {
        line("    fsync on: A → B \(fsync.latency.text) (p50 / p99 / max); one synced 8 kB write (pg_test_fsync, "
          + "\(fsync.method ?? "-")): \(fsync.syncMicros.map(BenchFormat.us) ?? "-") us")
      }
      line("    throughput: \(h.throughputCommits) one-row commits on A until B holds every row: "
        + "\(Int(h.throughputChangeSetsPerSecond)) change sets/s, "
        + "shipped as \(h.throughputLogEntries) log entries")
      if let references = h.referenceThroughputChangeSetsPerSecond {
        line("    with a foreign key in each row (translated to a global ID and back): \(Int(references)) change sets/s, "
          + String(format: "%.2f", references / h.throughputChangeSetsPerSecond) + " x the same commits without")
      }
    }

    if let f = r.fleet { fleetSection(f, line: line, row: row) }
    if let s = r.scale { scaleSection(s, line: line, row: row) }

    if let p = r.polling {
      line()
      line("3. The naive alternatives: PRAGMA data_version polled on a read-only connection, and inotify on the store's -wal")
      line("   file, then the same check, beside a GroupSync listener")
      row([("reader", 27), ("idle CPU us/s", 15), ("% of a core", 13), ("ticks", 7), ("detection latency (commits every \(p.commitIntervalMs) ms)", 40)])
      for idle in p.idle {
        let detection = p.detection.first { $0.reader == idle.process }?.latency
        row([(idle.process, 27), (String(format: "%.1f", idle.cpuMicrosPerSecond), 15),
             (String(format: "%.4f%%", idle.cpuPercentOfCore), 13), (String(idle.clockTicks), 7),
             (detection.map { "\($0.text)  (n \($0.n))" } ?? "-", 40)])
      }
      line("     idle window \(String(format: "%.1f", p.idleWindowSeconds)) s, nobody writing; CPU = the process's own getrusage (all threads,")
      line("     ns precision; includes answering the query), ticks = utime+stime from /proc/PID/stat (1/100 s);")
      line("     'no rescan' = a GroupSync listener with ListenerOptions.rescanInterval = 1 h.")
    }

    line()
    line("4. Capture overhead: what Store.write (capture, history row; no listeners) adds to the same statements, over raw")
    line("   SQLite and over plain GRDB; each writer on a file of its own, same pragmas and rows, in alternating blocks.")
    line("   raw = sqlite3 C calls, one statement stepped per row, BEGIN IMMEDIATE / COMMIT; GRDB = DatabasePool.write,")
    line("   db.cachedStatement(sql:) executed with arguments per row. 'GroupSync on X' runs X's statement code inside")
    line("   Store.write; + = its p50 over X's p50; GRDB/raw = what GRDB itself adds.")
    row([("rows/txn", 10), ("op", 8), ("raw us/txn", 22), ("GroupSync on raw", 22), ("+", 9), ("GRDB us/txn", 22),
         ("GroupSync on GRDB", 22), ("+", 9), ("GRDB/raw", 10), ("GS rows/s", 10)])
    for c in r.capture {
      row([(String(c.rows), 10), (c.operation, 8), (c.plain.text, 22), (c.groupsync.text, 22), (BenchFormat.percent(c.overhead), 9),
           (c.grdb?.text ?? "-", 22), (c.groupsyncGRDB?.text ?? "-", 22), (c.overheadOverGRDB.map(BenchFormat.percent) ?? "-", 9),
           (c.grdbOverPlain.map(BenchFormat.percent) ?? "-", 10), (BenchFormat.count(c.groupsyncRowsPerSecond), 10)])
    }
    if !r.codec.isEmpty {
      line("   change-set encoding v2 (in the writer; the same bytes are the history payload) and decoding, one table:")
      row([("rows", 10), ("bytes", 10), ("encode us", 22), ("decode us", 22)])
      for c in r.codec {
        row([(String(c.rows), 10), (String(c.bytes), 10), (c.encode.text, 22), (c.decode.text, 22)])
      }
    }
    if let cg = r.callgrind {
      if !cg.rows.isEmpty {
        line("   valgrind --tool=callgrind, instructions per row (difference of runs with N and 0 transactions), the same four writers;")
        line("   'GRDB+observer' = plain GRDB with one no-op TransactionObserver (what GRDB charges any observer; + over GRDB):")
        row([("rows/txn", 10), ("op", 8), ("txns", 6), ("raw Ir/row", 12), ("GroupSync on raw", 18), ("+", 9), ("GRDB Ir/row", 13),
             ("GroupSync on GRDB", 19), ("+", 9), ("GRDB/raw", 10), ("GRDB+observer", 15), ("+", 9)])
        func count(_ value: Double?) -> String { value.map { String(format: "%.0f", $0) } ?? "-" }
        for c in cg.rows {
          let observed = c.grdbObservedInstructionsPerRow.flatMap { o in c.grdbInstructionsPerRow.map { o / $0 - 1 } }
          row([(String(c.rows), 10), (c.operation, 8), (String(c.transactions), 6), (count(c.plainInstructionsPerRow), 12),
               (count(c.groupsyncInstructionsPerRow), 18), (BenchFormat.percent(c.overhead), 9), (count(c.grdbInstructionsPerRow), 13),
               (count(c.groupsyncGRDBInstructionsPerRow), 19), (c.overheadOverGRDB.map(BenchFormat.percent) ?? "-", 9),
               (c.grdbOverPlain.map(BenchFormat.percent) ?? "-", 10), (count(c.grdbObservedInstructionsPerRow), 15),
               (observed.map(BenchFormat.percent) ?? "-", 9)])
        }
      }
      if let skipped = cg.skipped { line("   callgrind: \(skipped)") }
    }

    if let t = r.throughput {
      line()
      line("5. Throughput to \(t.sustained.listeners) listener processes")
      line("   sustained, backlog held under \(t.sustained.backlogWindow): \(BenchFormat.count(t.sustained.changeSetsPerSecond)) change sets/s = \(BenchFormat.count(t.sustained.rowsPerSecond)) rows/s (\(t.sustained.changeSets) 1-row change sets in \(String(format: "%.1f", t.sustained.seconds)) s, max backlog \(t.sustained.maxBacklog))")
      if let floor = t.sustained.floorMessagesPerSecond, let ratio = t.sustained.ratioToFloor {
        line("   the floor, same window, \(t.sustained.listeners) watchers: \(BenchFormat.count(floor)) messages/s (max backlog \(t.sustained.floorMaxBacklog ?? 0)); GroupSync / floor \(BenchFormat.ratio(ratio))")
      }
      line("   writer flat out: writes \(BenchFormat.count(t.openLoop.writerChangeSetsPerSecond))/s, delivered \(BenchFormat.count(t.openLoop.deliveredChangeSetsPerSecond))/s, backlog when the writer stopped: \(t.openLoop.backlogAtEnd)")
      line("   \(t.bulk.rowsPerTransaction)-row transactions (capture, encode, fan out, decode): \(BenchFormat.count(t.bulk.rowsPerSecond)) rows/s end to end over \(t.bulk.transactions) transactions;")
      line("      write \(t.bulk.write.text) per transaction, commit -> last listener \(t.bulk.latency.text)")
    }

    if let f = r.fanOut {
      line()
      line("6. Writer cost per listener: Store.write of a 1-row insert with N live listeners, and the floor's writer (file +")
      line("   N links) with N watchers; listeners and watchers stopped (SIGSTOP) so that they do not compete for the CPUs")
      row([("N", 6), ("GroupSync write us", 24), ("floor publish us", 24)])
      for p in f.points { row([(String(p.listeners), 6), (p.write.text, 24), (p.floorPublish?.text ?? "-", 24)]) }
      line("   per extra listener (slope of p50 over N >= 1): GroupSync \(String(format: "%.1f", f.microsPerExtraListener)) us, floor \(String(format: "%.1f", f.floorMicrosPerExtraListener)) us; first listener (encode + file): \(String(format: "%.1f", f.firstListenerMicros)) us")
    }
    if let mem = r.memory {
      line("   listener memory, backlog written while it was stopped, then drained (peak RSS = VmHWM):")
      row([("backlog", 10), ("write s", 9), ("drain s", 9), ("drain/s", 10), ("peak RSS", 12), ("RSS after", 12), ("resets", 7)])
      line("   baseline peak RSS \(String(format: "%.1f", Double(mem.baselinePeakKB) / 1024)) MiB")
      for row_ in mem.rows {
        row([(String(row_.backlog), 10), (String(format: "%.1f", row_.writeSeconds), 9), (String(format: "%.1f", row_.drainSeconds), 9),
             (BenchFormat.count(row_.drainChangeSetsPerSecond), 10), (String(format: "%.1f MiB", Double(row_.peakKB) / 1024), 12),
             (String(format: "%.1f MiB", Double(row_.rssAfterKB) / 1024), 12), (String(row_.resets), 7)])
      }
    }

    if let reads = r.readLatency {
      line()
      line("7. Reads in the writing process: store.read (the store's DatabasePool readers) while a thread of the same process")
      line("   commits 1-row transactions back to back through Store.write, fanned out to \(reads.listeners) listener processes;")
      line("   baseline: the same read on a separate read-only GRDB DatabaseQueue on the same file, in the same process,")
      line("   in alternating blocks of 50, each read after a random pause of 100-300 us.")
      line("   Read: Int64.fetchOne(db, sql: \"\(reads.statement)\")")
      row([("reader", 22), ("us per read", 26), ("n", 7), ("p50 ratio", 10), ("p99 ratio", 10)])
      row([("store.read", 22), (reads.storeRead.text, 26), (String(reads.storeRead.n), 7), (BenchFormat.ratio(reads.ratioP50), 10),
           (BenchFormat.ratio(reads.ratioP99), 10)])
      row([("separate connection", 22), (reads.separateConnection.text, 26), (String(reads.separateConnection.n), 7), ("1.00x", 10),
           ("1.00x", 10)])
      line("   writer meanwhile: \(reads.commits) commits in \(String(format: "%.1f", reads.seconds)) s "
        + "(\(BenchFormat.count(reads.commitsPerSecond))/s), Store.write \(reads.write.text) us"
        + (reads.writeFailures > 0 ? ", \(reads.writeFailures) failed" : "") + "; each listener received "
        + "\(reads.deliveredPerListener) change sets, \(reads.resets) resets")
    }
    if let c = r.catchUp {
      line()
      line("8. Catch-up: a durable listener replays \(c.changeSets) 1-row change sets from the history: "
        + "\(BenchFormat.count(c.changeSetsPerSecond)) change sets/s (\(String(format: "%.2f", c.seconds)) s); "
        + "history \(String(format: "%.0f", c.historyBytesPerChangeSet)) bytes per change set")
    }

    if let c = r.contexts {
      line()
      line("9. Contexts: \(c.objects) rows, every one registered in a context; a results controller over all of them")
      line("   (filter score >= 0, order by score). Baseline: the same query run again (Row.fetchAll), what GRDB's")
      line("   ValueObservation does for any change to the table; alternating with the merges.")
      row([("operation", 44), ("us", 26), ("n", 7), ("query again / it", 16)])
      row([("merge a 1-row change set", 44), (c.mergeOneRow.text, 26), (String(c.mergeOneRow.n), 7),
           (BenchFormat.ratio(c.mergeAdvantage), 16)])
      row([("merge a 1000-row change set", 44), (c.mergeThousandRows.text, 26), (String(c.mergeThousandRows.n), 7), ("", 16)])
      row([("results controller, a 1-row move", 44), (c.controllerOneRow.text, 26), (String(c.controllerOneRow.n), 7),
           (BenchFormat.ratio(c.controllerAdvantage), 16)])
      row([("re-running the query (baseline)", 44), (c.requery.text, 26), (String(c.requery.n), 7), ("1.00x", 16)])
    }

    line()
    line("Targets")
    for t in r.targets {
      let verdict = t.met.map { $0 ? "met   " : "MISSED" } ?? "n/a   "
      line("  \(verdict) \(t.target): \(t.figure)")
    }
    for note in r.notes { line("note: \(note)") }
    return out.joined(separator: "\n")
  }
}
