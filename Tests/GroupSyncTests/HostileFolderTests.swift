import Foundation
import GRDB
import GroupSyncProcess
import GroupSyncTestSupport
import Testing

@testable import GroupSync

#if canImport(Glibc)
import Glibc
#endif

/// Another process of the same user may plant anything in the group
/// folder. Each test keeps a decoy file and a decoy folder outside the group
/// whose bytes and times must not change, whatever happens inside. Each
/// test has folders of its own: they run side by side.
@Suite(.timed)
struct HostileFolderTests {
  static let schema = ListenerFixture.schema
  static let insert = ListenerFixture.insert
  static var options: ListenerOptions { ListenerFixture.options }

  /// Files outside the group folder that nothing may touch.
  struct Decoys {
    let file: String
    let folder: String
    let inside: String
    private let snapshot: [String: (bytes: Data, mtime: timespec)]

    init(in parent: TemporaryFolder) throws {
      file = parent.child("decoy-file")
      folder = parent.child("decoy-folder")
      inside = folder + "/precious.txt"
      try Data("do not touch".utf8).write(to: URL(fileURLWithPath: file))
      try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
      try Data("precious".utf8).write(to: URL(fileURLWithPath: inside))
      var snapshot: [String: (bytes: Data, mtime: timespec)] = [:]
      for path in [file, inside, folder] {
        var info = stat()
        stat(path, &info)
        snapshot[path] = (path == folder ? Data() : try Data(contentsOf: URL(fileURLWithPath: path)), info.st_mtim)
      }
      self.snapshot = snapshot
    }

    /// Every decoy has its bytes and modification time, and the folder
    /// holds exactly what it held.
    func expectUntouched(_ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
      for (path, old) in snapshot {
        var info = stat()
        #expect(stat(path, &info) == 0, "\(path) is gone", sourceLocation: sourceLocation)
        #expect(
          info.st_mtim.tv_sec == old.mtime.tv_sec && info.st_mtim.tv_nsec == old.mtime.tv_nsec,
          "\(path) was modified \(comment.map { "(\($0))" } ?? "")", sourceLocation: sourceLocation)
        if path != folder {
          #expect((try? Data(contentsOf: URL(fileURLWithPath: path))) == old.bytes, "\(path) changed", sourceLocation: sourceLocation)
        }
      }
      #expect(ProcessHarness.entries(folder) == ["precious.txt"], "\(folder) holds other entries", sourceLocation: sourceLocation)
    }
  }

  func makeGroup(_ folder: TemporaryFolder) async throws -> (String, GroupFolder) {
    let directory = try await ProcessHarness.initGroup(folder, schema: Self.schema)
    return (directory, try GroupFolder(path: directory, create: false))
  }

  /// Waits until `listener` delivers `written`, skipping exactly `resets`
  /// resets on the way.
  func expectDelivery(
    _ listener: Listener, _ written: [ChangeSetLine], resets: Int = 0, sourceLocation: SourceLocation = #_sourceLocation
  ) async throws {
    var seenResets = 0
    var delivered: [ChangeSetLine] = []
    while delivered.count < written.count {
      guard let event = await ListenerHarness.next(listener, timeout: .seconds(60)) else {
        Issue.record("nothing delivered; got \(delivered), \(seenResets) resets", sourceLocation: sourceLocation)
        return
      }
      switch event {
      case .changes(let changeSet): delivered.append(ChangeSetLine(changeSet))
      case .reset: seenResets += 1
      }
    }
    #expect(delivered == written, sourceLocation: sourceLocation)
    #expect(seenResets == resets, "resets", sourceLocation: sourceLocation)
  }

  // MARK: Symlinks

  @Test func anInboxReplacedByASymlinkIsNeverFollowed() async throws {
    let folder = try TemporaryFolder()
    let decoys = try Decoys(in: folder)
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "victim", options: Self.options)
    let inbox = group.layout.inbox("victim")
    try FileManager.default.removeItem(atPath: inbox)
    try FileManager.default.createSymbolicLink(atPath: inbox, withDestinationPath: decoys.folder)
    // Writers refuse the symlink; the listener notices, makes its inbox
    // again and resets once; delivery goes on.
    let first = try await ProcessHarness.run(["exec", directory, "--json"] + Self.insert)
    _ = try await ListenerHarness.nextReset(listener)
    decoys.expectUntouched("while running")
    let written = try await ProcessHarness.exec(directory, repeat: 2, Self.insert)
    try await expectDelivery(listener, written)
    #expect(first.status == 0 || first.status == 3)
    // Planted again, then the listener closes, and a new one starts.
    try FileManager.default.removeItem(atPath: inbox)
    try FileManager.default.createSymbolicLink(atPath: inbox, withDestinationPath: decoys.folder)
    listener.close()
    decoys.expectUntouched("on close")
    let again = try group.listen(as: "victim", options: Self.options)
    defer { again.close() }
    decoys.expectUntouched("on the next start")
    var info = stat()
    #expect(lstat(inbox, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR, "a real inbox was made again")
    let later = try await ProcessHarness.exec(directory, Self.insert)
    try await expectDelivery(again, later)
    decoys.expectUntouched()
  }

  @Test func aLockReplacedByASymlinkIsNeverWritten() async throws {
    let folder = try TemporaryFolder()
    let decoys = try Decoys(in: folder)
    let (directory, group) = try await makeGroup(folder)
    let first = try group.listen(as: "victim", options: Self.options)
    first.close()
    let lock = group.layout.lockFile("victim")
    try FileManager.default.removeItem(atPath: lock)
    try FileManager.default.createSymbolicLink(atPath: lock, withDestinationPath: decoys.file)
    // Writers and status refuse it (not live)...
    _ = try await ProcessHarness.exec(directory, Self.insert)
    let status = try await ProcessHarness.status(directory)
    #expect(status.listeners.first { $0.name == "victim" }?.isLive == false)
    decoys.expectUntouched()
    // ...and a listener taking the name replaces the symlink itself.
    let listener = try group.listen(as: "victim", options: Self.options)
    defer { listener.close() }
    decoys.expectUntouched()
    var info = stat()
    #expect(lstat(lock, &info) == 0 && info.st_mode & S_IFMT == S_IFREG)
    let written = try await ProcessHarness.exec(directory, Self.insert)
    try await expectDelivery(listener, written)
  }

  @Test func aFIFOAsALockHangsNeitherWritersNorStatus() async throws {
    let folder = try TemporaryFolder()
    let decoys = try Decoys(in: folder)
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "live", options: Self.options)
    defer { listener.close() }
    let planted = group.layout.listenerFolder("fifo")
    try FileManager.default.createDirectory(atPath: planted + "/inbox", withIntermediateDirectories: true)
    #expect(mkfifo(planted + "/lock", 0o644) == 0)
    let written = try await ProcessHarness.exec(directory, repeat: 3, Self.insert)  // fails the test if it hangs (timeout)
    try await expectDelivery(listener, written)
    let status = try await ProcessHarness.run(["status", directory, "--json"], timeout: 60)
    #expect(status.status == 0)
    #expect(try await ProcessHarness.status(directory).listeners.first { $0.name == "fifo" }?.isLive == false)
    // A listener taking that name replaces the FIFO.
    let taker = try group.listen(as: "fifo", options: Self.options)
    taker.close()
    decoys.expectUntouched()
  }

  // MARK: Folders replaced or removed

  @Test func anInboxReplacedByAFileIsMadeAgainWithOneReset() async throws {
    let folder = try TemporaryFolder()
    let decoys = try Decoys(in: folder)
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "victim", options: Self.options)
    defer { listener.close() }
    let inbox = group.layout.inbox("victim")
    try FileManager.default.removeItem(atPath: inbox)
    try Data("not a folder".utf8).write(to: URL(fileURLWithPath: inbox))
    // The writer cannot deliver to it: exec says so and exits 3.
    let undelivered = try await ProcessHarness.run(["exec", directory] + Self.insert)
    #expect(undelivered.status == 3, "\(undelivered.stderr)")
    #expect(undelivered.stderr.contains("was not delivered to 'victim'") && undelivered.stdout.contains("committed sequence"))
    _ = try await ListenerHarness.nextReset(listener)
    let written = try await ProcessHarness.exec(directory, repeat: 3, Self.insert)
    try await expectDelivery(listener, written)
    decoys.expectUntouched()
  }

  @Test func removedListenersFolderIsMadeAgainWithOneReset() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "victim", options: Self.options)
    defer { listener.close() }
    try FileManager.default.removeItem(atPath: group.layout.listeners)
    _ = try await ListenerHarness.nextReset(listener)
    let written = try await ProcessHarness.exec(directory, repeat: 3, Self.insert)
    try await expectDelivery(listener, written)
    // No further resets once it recovered.
    #expect(await ListenerHarness.next(listener, timeout: .milliseconds(700)) == nil)
    #expect(try await ProcessHarness.status(directory).listeners.first { $0.name == "victim" }?.isLive == true)
  }

  @Test func anInboxMadeAnewIsWatchedAgain() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    var options = Self.options
    options.rescanInterval = .seconds(3600)  // only inotify can wake it up
    let listener = try group.listen(as: "victim", options: options)
    defer { listener.close() }
    let inbox = group.layout.inbox("victim")
    try FileManager.default.removeItem(atPath: inbox)
    try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
    _ = try await ListenerHarness.nextReset(listener, timeout: .seconds(60))
    let written = try await ProcessHarness.exec(directory, Self.insert)
    // Delivered within a minute, so by inotify: the next rescan is an hour away.
    let changeSet = try await ListenerHarness.nextChanges(listener, timeout: .seconds(60))
    #expect(ChangeSetLine(changeSet) == written[0])
  }

  // MARK: Bad names, floods, leftovers

  @Test func aFileNameThatIsNotUTF8IsRemovedWithOneReset() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "victim", options: Self.options)
    defer { listener.close() }
    let name: [UInt8] = Array((group.layout.inbox("victim") + "/bad-").utf8) + [0xFF, 0xFE, 0x00]
    let fd = name.withUnsafeBufferPointer {
      $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_CREAT | O_WRONLY, 0o644) }
    }
    #expect(fd >= 0)
    close(fd)
    let reset = try await ListenerHarness.nextReset(listener)
    #expect(reset.reason.contains("bad-\\xff\\xfe"))
    #expect(ProcessHarness.entries(group.layout.inbox("victim")).isEmpty)
    let written = try await ProcessHarness.exec(directory, Self.insert)
    try await expectDelivery(listener, written)
  }

  @Test func aFloodOfJunkIsOneResetAndAClearedInbox() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "victim", options: Self.options)
    defer { listener.close() }
    let inbox = group.layout.inbox("victim")
    for index in 0..<100_000 {
      let fd = open(inbox + "/junk-\(index)", O_CREAT | O_WRONLY, 0o644)
      if fd >= 0 { close(fd) }
    }
    let reset = try await ListenerHarness.nextReset(listener, timeout: .seconds(60))
    #expect(reset.reason.contains("and 99995 more"), "\(reset.reason)")
    #expect(ProcessHarness.entries(inbox).isEmpty)
    let written = try await ProcessHarness.exec(directory, Self.insert)
    try await expectDelivery(listener, written)
  }

  /// A flood dropped while a listener process consumes (it rescans many
  /// times during it) is one act: one reset, a cleared inbox, and
  /// delivery as before.
  @Test func aFloodDroppedWhileTheListenerRunsIsOneReset() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let watch = try await ProcessHarness.startWatch([directory, "--name", "victim", "--json", "--grace-ms", "200"])
    defer { watch.signal(SIGKILL) }
    let inbox = group.layout.inbox("victim")
    var drops = DropGaps()
    for index in 0..<100_000 {
      let fd = open(inbox + "/junk-\(index)", O_CREAT | O_WRONLY, 0o644)
      if fd >= 0 { close(fd) }
      drops.dropped()
    }
    try await waitUntil("the inbox is cleared", timeout: .seconds(60)) { ProcessHarness.entries(inbox).isEmpty }
    let written = try await ProcessHarness.exec(directory, Self.insert)
    try await waitUntil("the next change set is delivered", timeout: .seconds(60)) {
      watch.stdout.contains("\"seq\":\(written[0].seq)")
    }
    let lines = try ProcessHarness.printedLines(watch)
    let resets = lines.filter { $0["reset"] != nil }
    #expect((1...drops.acts).contains(resets.count), "\(resets.count) resets for \(drops): \(resets.prefix(3))")
    #expect(lines.last?["reset"] == nil)
  }

  /// Junk that keeps coming while the listener process is stopped for
  /// longer than its quiet time (a machine too busy to run it) is still
  /// one act: the files' change times say it never paused. Foreign names
  /// (the inbox's upkeep) and forged change sets beyond the store's
  /// sequence (the history's check). (Junk that replaces junk under one
  /// name leaves only the newest's time: there, a listener stopped longer
  /// than its quiet time answers again.)
  @Test(arguments: ["foreign", "beyond"])
  func junkThatKeptComingWhileTheListenerWasStoppedIsOneAct(kind: String) async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let watch = try await ProcessHarness.startWatch([directory, "--name", "victim", "--json", "--grace-ms", "200"])
    defer { watch.signal(SIGKILL) }
    let inbox = group.layout.inbox("victim")
    let staging = folder.child("staging")
    try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
    let base = try await ProcessHarness.status(directory).sequence
    var junk = JunkDropper(inbox: inbox, staging: staging, forged: kind == "beyond" ? base + 5000 : nil)
    try junk.drop(for: .seconds(1))
    try await waitUntil("the listener answers the act", timeout: .seconds(60)) { watch.stdout.contains("\"reset\"") }
    watch.signal(SIGSTOP)
    try junk.drop(for: DropGaps.quiet + .seconds(1))
    watch.signal(SIGCONT)
    try junk.drop(for: .milliseconds(500))
    try await Self.expectOneResetPerAct(watch, junk, directory)
  }

  /// A listener stopped right after it judged forged files, before it
  /// removed them, while forged files kept coming for longer than its
  /// quiet time: the files it removes once it runs again arrived within
  /// the act, and the junk after them continues it. One reset. (Before,
  /// their arrival was not noted, and the next junk was a second act:
  /// `junkThatKeptComingWhileTheListenerWasStoppedIsOneAct` failed so
  /// under ASan when the stop fell there.)
  @Test func forgedFilesRemovedAfterAStopContinueTheAct() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    var environment = ProcessInfo.processInfo.environment
    environment["GROUPSYNC_FAILPOINT"] = "stop-after-judging-forged-files"
    let watch = try ChildProcess(
      executable: CLI.executable, arguments: ["watch", directory, "--name", "victim", "--json", "--grace-ms", "200"],
      environment: environment, name: "watch")
    defer { watch.signal(SIGKILL) }
    try await ProcessHarness.onThread { try watch.waitForStderr(containing: "listening as", timeout: 30) }
    let inbox = group.layout.inbox("victim")
    let staging = folder.child("staging")
    try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
    let base = try await ProcessHarness.status(directory).sequence
    var junk = JunkDropper(inbox: inbox, staging: staging, forged: base + 5000)
    // Junk until the listener judges it and stops; then on, past its quiet time.
    let deadline = ContinuousClock.now + .seconds(60)
    while !CrashCampaignTests.isStopped(watch.pid) {
      guard ContinuousClock.now < deadline else { throw TestFailure("the listener never judged the forged files") }
      try junk.dropOne()
    }
    try junk.drop(for: DropGaps.quiet + .seconds(1))
    watch.signal(SIGCONT)
    try junk.drop(for: .milliseconds(700))
    try await Self.expectOneResetPerAct(watch, junk, directory)
  }

  /// Commits, waits until `watch` delivers it (the junk before it dealt
  /// with), and expects one reset per act of `junk`'s drops.
  static func expectOneResetPerAct(_ watch: ChildProcess, _ junk: JunkDropper, _ directory: String) async throws {
    let written = try await ProcessHarness.exec(directory, insert)
    try await waitUntil("the next change set is delivered", timeout: .seconds(60)) {
      watch.stdout.contains("\"seq\":\(written[0].seq)")
    }
    let resets = try ProcessHarness.printedLines(watch).filter { $0["reset"] != nil }
    #expect((1...junk.drops.acts).contains(resets.count), "\(resets.count) resets for \(junk.drops): \(resets.prefix(3))")
  }

  /// Forged change sets (valid names, junk inside, sequences the store
  /// never reached) dropped one after another: one reset, and the real
  /// change sets committed meanwhile all arrive, in order.
  @Test func forgedChangeSetsDroppedOneAfterAnotherAreOneReset() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let watch = try await ProcessHarness.startWatch([directory, "--name", "victim", "--json", "--grace-ms", "200"])
    defer { watch.signal(SIGKILL) }
    let inbox = group.layout.inbox("victim")
    let staging = folder.child("staging")
    try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
    let base = try await ProcessHarness.status(directory).sequence
    // A writer commits throughout, while junk lands under the names of the
    // sequences it commits (a real file may be replaced by junk) and forged
    // files far beyond the store's sequence, a drop every 20 ms.
    // The drops come from a thread of their own: a sleep on the cooperative
    // pool, shared with the tests beside this one, may last seconds on a
    // busy machine, and junk two seconds apart is two acts.
    let writer = try CLI.start(["exec", directory, "--repeat", "20", Self.insert[0]])
    let drops = try await ProcessHarness.onThread {
      var drops = DropGaps()
      for round in Int64(1)...60 {
        for sequence in [base + round / 2, base + 5000 + round] {
          try ProcessHarness.placeAtomically(
            Array("junk \(round)".utf8), at: inbox + "/" + GroupLayout.fileName(sequence: sequence), staging: staging)
          drops.dropped()
        }
        usleep(20_000)
      }
      return drops
    }
    #expect(try await ProcessHarness.finish(writer, timeout: 120).status == 0)
    let last = try await ProcessHarness.exec(directory, Self.insert)
    try await waitUntil("the last change set is delivered", timeout: .seconds(60)) {
      watch.stdout.contains("\"seq\":\(last[0].seq)")
    }
    let lines = try ProcessHarness.printedLines(watch)
    let resets = lines.filter { $0["reset"] != nil }
    #expect((1...drops.acts).contains(resets.count), "\(resets.count) resets for \(drops): \(resets.prefix(3))")
    // After the one reset, every later commit arrives, once, in order.
    let resetAt = (resets.first?["seq"] as? NSNumber)?.int64Value ?? base
    let delivered = lines.compactMap { $0["reset"] == nil ? ($0["seq"] as? NSNumber)?.int64Value : nil }
    #expect(Array(delivered.drop { $0 <= resetAt }) == Array((resetAt + 1)...last[0].seq))
  }

  @Test func listingTwoThousandEntriesReadsEachNameWithinItsLength() throws {
    // Under AddressSanitizer (make test), a copy of d_name past a short
    // entry at the end of readdir's buffer is a heap-buffer-overflow.
    let folder = try TemporaryFolder()
    for index in 0..<2000 {
      let fd = open(folder.child(String(repeating: "n", count: index % 7 + 1) + "\(index)"), O_CREAT | O_WRONLY, 0o644)
      close(fd)
    }
    let directory = try SafeDirectory.root(folder.path)
    var names = Set<String>()
    try directory.forEachEntry { names.insert(String(decoding: $0, as: UTF8.self)) }
    #expect(names.count == 2000)
    #expect(names.contains("nnnnnnn1999") || names.contains("n1999") || names.count == 2000)
  }

  @Test func staleTemporaryFilesAreSweptByWriters() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "live", options: Self.options)
    defer { listener.close() }
    let tmp = group.layout.tmp
    let old = timespec(tv_sec: time(nil) - 3600, tv_nsec: 0)
    for name in ["00000000000000000009.changeset.999999.1.tmp", "planted-junk", "00000000000000000009.changeset.\(getpid()).2.tmp"] {
      try Data("x".utf8).write(to: URL(fileURLWithPath: tmp + "/" + name))
      var times = [old, old]
      #expect(utimensat(AT_FDCWD, tmp + "/" + name, &times, 0) == 0)
    }
    try Data("x".utf8).write(to: URL(fileURLWithPath: tmp + "/fresh"))
    _ = try await ProcessHarness.exec(directory, Self.insert)
    // The dead writer's file and old junk go; a live process's and a fresh file stay.
    #expect(ProcessHarness.entries(tmp) == ["00000000000000000009.changeset.\(getpid()).2.tmp", "fresh"])
  }

  // MARK: Commits that were never published

  @Test func aWriterKilledAfterCommitIsFilledFromTheHistory() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "live", options: Self.options)
    defer { listener.close() }
    let watch = try await ProcessHarness.startWatch([directory, "--name", "other", "--json", "--count", "1", "--grace-ms", "200"])
    // Exactly what a writer SIGKILLed between COMMIT and fan-out leaves:
    // the row and its history entry, no file anywhere.
    let changeSet = try ProcessHarness.commitWithoutPublishing(store: group.layout.store) { db in
      try db.execute(sql: "INSERT INTO items(body) VALUES ('orphan')")
      return ("items", db.lastInsertedRowID)
    }
    let delivered = try await ListenerHarness.nextChanges(listener, timeout: .seconds(60))
    #expect(delivered == changeSet)
    let other = try jsonLines(try await ProcessHarness.finish(watch, timeout: 10).stdout).map(ChangeSetLine.init(json:))
    #expect(other == [ChangeSetLine(changeSet)])
  }

  @Test func aCommitWithoutAChangeSetIsAResetWithinTheRescanInterval() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "live", options: Self.options)
    defer { listener.close() }
    // A foreign program: the sqlite3 shell, Python, a migration tool.
    var configuration = Configuration()
    configuration.busyMode = .timeout(10)
    let foreign = try DatabaseQueue(path: group.layout.store, configuration: configuration)
    try await foreign.write { try $0.execute(sql: "INSERT INTO items(body) VALUES ('sneaky')") }
    let reset = try await ListenerHarness.nextReset(listener, timeout: .seconds(60))
    #expect(reset.reason.contains("without a change set"))
    // VACUUM by anyone is such a commit too.
    try await foreign.writeWithoutTransaction { try $0.execute(sql: "VACUUM") }
    let vacuum = try await ListenerHarness.nextReset(listener, timeout: .seconds(60))
    #expect(vacuum.reason.contains("VACUUM"))
    let status = try await ProcessHarness.status(directory)
    #expect(status.lastForeignCommit?.listener == "live")
    #expect(try await ProcessHarness.run(["status", directory]).stdout.contains("foreign:  a commit without a change set"))
    // GroupSync's own commits are not mistaken for foreign ones.
    let written = try await ProcessHarness.exec(directory, repeat: 2, Self.insert)
    try await expectDelivery(listener, written)
    #expect(await ListenerHarness.next(listener, timeout: .milliseconds(600)) == nil)
  }

  /// What moves `PRAGMA data_version` without a commit: a checkpoint that
  /// restarts the WAL (TRUNCATE), and a GroupSync writer killed inside a
  /// transaction that spilled into a WAL it had just restarted. Neither is
  /// a foreign commit; the listener stays quiet, and a real foreign commit
  /// after them is still told.
  @Test func aRestartedWALWithoutACommitIsNotAForeignCommit() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "live", options: Self.options)
    defer { listener.close() }
    var configuration = Configuration()
    configuration.busyMode = .timeout(10)
    let other = try DatabaseQueue(path: group.layout.store, configuration: configuration)
    let bystander = try DatabaseQueue(path: group.layout.store, configuration: configuration)

    // 1. A checkpoint that empties and restarts the WAL.
    let first = try await ProcessHarness.exec(directory, Self.insert)
    try await expectDelivery(listener, first)
    let versionBefore = try await dataVersion(bystander)
    try await other.writeWithoutTransaction { _ = try Row.fetchAll($0, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
    #expect(try await dataVersion(bystander) != versionBefore, "the checkpoint moved data_version")
    #expect(await ListenerHarness.next(listener, timeout: .milliseconds(700)) == nil, "a checkpoint is no commit")

    // 2. A writer that restarted the WAL (all of it was checkpointed) and
    // spilled its pages into it, killed before its COMMIT.
    for round in 0..<3 {
      let written = try await ProcessHarness.exec(directory, Self.insert)
      try await expectDelivery(listener, written)
      try await other.writeWithoutTransaction { _ = try Row.fetchAll($0, sql: "PRAGMA wal_checkpoint(PASSIVE)") }
      let before = try await dataVersion(bystander)
      var environment = ProcessInfo.processInfo.environment
      environment["GROUPSYNC_FAILPOINT"] = "stop-before-commit"
      let writer = try ChildProcess(
        executable: CLI.executable,
        arguments: [
          "exec", directory, "PRAGMA cache_size = 2",
          "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 400) "
            + "INSERT INTO items(body) SELECT hex(randomblob(400)) FROM n",
        ],
        environment: environment, name: "writer killed before COMMIT")
      try await waitUntil("the writer stopped before its COMMIT (round \(round))", timeout: .seconds(30)) {
        CrashCampaignTests.isStopped(writer.pid)
      }
      writer.signal(SIGKILL)
      _ = writer.finish(timeout: 10)
      #expect(try await dataVersion(bystander) != before, "round \(round): the killed writer moved data_version")
      #expect(await ListenerHarness.next(listener, timeout: .milliseconds(700)) == nil, "round \(round): nobody committed")
    }
    #expect(try await other.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM items") } == 4)

    // 3. A foreign commit after all this is still one.
    try await other.write { try $0.execute(sql: "INSERT INTO items(body) VALUES ('sneaky')") }
    let reset = try await ListenerHarness.nextReset(listener, timeout: .seconds(60))
    #expect(reset.reason.contains("without a change set"))
    let written = try await ProcessHarness.exec(directory, Self.insert)
    try await expectDelivery(listener, written)
  }

  /// GroupSync's own commits that carry no change set: the defaults
  /// table made on first use, a value set to what it was (from another
  /// process), a durable place kept in the store acknowledged with nothing
  /// else (and its table made). Each counts itself, so no listener takes it
  /// for a foreign commit; a foreign commit among them is still one.
  @Test func groupSyncsOwnCommitsWithoutAChangeSetAreNotForeign() async throws {
    let folder = try TemporaryFolder()
    let (directory, group) = try await makeGroup(folder)
    let listener = try group.listen(as: "live", options: Self.options)
    defer { listener.close() }
    for round in 0..<4 {
      let set = try await ProcessHarness.run(["defaults", directory, "set", "mode", "dark"])
      #expect(set.status == 0, "\(set.stderr)")
      if round == 0 {
        let first = try await ListenerHarness.nextChanges(listener, timeout: .seconds(60))
        #expect(first.notes.map(\.name) == ["defaults/default"])
      }
    }
    let quietAfterDefaults = await ListenerHarness.next(listener, timeout: .milliseconds(700))
    #expect(quietAfterDefaults == nil, "a value set to what it was is no foreign commit")

    var options = Self.options
    options.acknowledgement = .inStore
    let consumer = try group.listen(as: "indexer", durable: true, options: options)
    defer { consumer.close() }
    let written = try await ProcessHarness.exec(directory, Self.insert)
    try await expectDelivery(listener, written)
    let changeSet = try await ListenerHarness.nextChanges(consumer, timeout: .seconds(60))
    try await group.store.write { db in try consumer.acknowledge(changeSet, in: db) }
    let quietAfterPlace = await ListenerHarness.next(listener, timeout: .milliseconds(700))
    #expect(quietAfterPlace == nil, "a place acknowledged in the store is no foreign commit")

    // A foreign commit, then a quiet one: still a foreign commit.
    var configuration = Configuration()
    configuration.busyMode = .timeout(10)
    let foreign = try DatabaseQueue(path: group.layout.store, configuration: configuration)
    try await foreign.write { try $0.execute(sql: "INSERT INTO items(body) VALUES ('sneaky')") }
    try group.defaults(suite: "default").set(.string("dark"), forKey: "mode")
    let reset = try await ListenerHarness.nextReset(listener, timeout: .seconds(60))
    #expect(reset.reason.contains("without a change set"))
  }

  /// `PRAGMA data_version` as `connection` sees it in a new read: whether
  /// the wal-index header moved since its last read. (Read through SQLite:
  /// opening the `-shm` file here would drop this process's locks on it.)
  private func dataVersion(_ connection: DatabaseQueue) async throws -> Int64 {
    try await connection.read { try Int64.fetchOne($0, sql: "PRAGMA data_version") ?? 0 }
  }
}

/// The drops of a hostile act, timed by the test that makes them: a drop
/// that comes more than the listener's quiet time (twice the rescan
/// interval of `groupsync watch`: 2 s) after the one before starts a new
/// act, which a machine busy enough to stall the test's thread that long
/// makes (the listener may still see one: it looked late). Every other
/// pause, the listener's own included, is one act.
/// An attacker's script: a junk file into a listener's inbox every 50 ms
/// (the pace is the workload), foreign names, or forged change-set names
/// from `forged` + 1 on; the pauses between drops counted (``DropGaps``).
struct JunkDropper {
  let inbox: String
  let staging: String
  let forged: Int64?
  private(set) var drops = DropGaps()
  private var index: Int64 = 0

  init(inbox: String, staging: String, forged: Int64?) {
    (self.inbox, self.staging, self.forged) = (inbox, staging, forged)
  }

  mutating func dropOne() throws {
    index += 1
    let name = forged.map { GroupLayout.fileName(sequence: $0 + index) } ?? "junk-\(index)"
    try ProcessHarness.placeAtomically(Array("junk \(index)".utf8), at: inbox + "/" + name, staging: staging)
    drops.dropped()
    usleep(50_000)
  }

  mutating func drop(for duration: Duration) throws {
    let end = ContinuousClock.now + duration
    while ContinuousClock.now < end { try dropOne() }
  }
}

struct DropGaps: CustomStringConvertible, Sendable {
  static let quiet = Duration.seconds(2)
  private var last: ContinuousClock.Instant?
  private(set) var longest = Duration.zero
  private(set) var acts = 1

  mutating func dropped() {
    let now = ContinuousClock.now
    if let last {
      longest = max(longest, now - last)
      // A margin for the clocks: the listener compares change times.
      if now - last > Self.quiet - .milliseconds(100) { acts += 1 }
    }
    last = now
  }

  var description: String { "\(acts) act(s) of drops (longest pause \(longest))" }
}
