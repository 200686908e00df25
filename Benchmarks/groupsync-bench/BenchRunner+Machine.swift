// The machine a run measured: cores, load, engine revision, filesystem.
import CGroupSync
import Foundation
import GroupSync
import GroupSyncProcess
#if canImport(Glibc)
import Glibc
#endif

extension BenchRunner {
  // MARK: Machine

  static func machine(workFolder: String) -> BenchMachine {
    let cpuinfo = BenchProc.read("/proc/cpuinfo") ?? ""
    let model = cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
      .map { String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces) } ?? "unknown"
    var name = utsname()
    uname(&name)
    func field<T>(_ value: T) -> String {
      withUnsafeBytes(of: value) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }
    return BenchMachine(
      nproc: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), cpuModel: model,
      kernel: "\(field(name.sysname)) \(field(name.release)) \(field(name.machine))",
      sqliteVersion: String(cString: sqlite3_libversion()), engine: engineRevision(), workFolder: workFolder,
      filesystem: filesystem(workFolder), loadAverageStart: loadAverage())
  }

  /// The git revision of the sources in the current folder, if any, and
  /// whether the engine's sources differ from it.
  static func engineRevision() -> String {
    guard let git = which("git"),
      let head = try? ChildProcess.run(git, ["rev-parse", "--short", "HEAD"], timeout: 10), head.succeeded
    else { return "unknown" }
    let revision = head.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    let status = try? ChildProcess.run(git, ["status", "--porcelain", "--", "Sources/GroupSync", "CSupport", "Package.swift"], timeout: 10)
    let dirty = status.map { !$0.stdout.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty } ?? false
    return revision + (dirty ? " with uncommitted engine changes" : "")
  }

  static func loadAverage() -> String {
    (BenchProc.read("/proc/loadavg") ?? "").split(separator: " ").prefix(3).joined(separator: " ")
  }

  /// The type of the filesystem holding `path`: the mount with the longest
  /// mount point that is a prefix of it, from /proc/self/mounts.
  static func filesystem(_ path: String) -> String {
    let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    var best: (point: String, type: String, device: String) = ("", "unknown", "")
    for line in (BenchProc.read("/proc/self/mounts") ?? "").split(separator: "\n") {
      let fields = line.split(separator: " ")
      guard fields.count >= 3 else { continue }
      let point = String(fields[1])
      let inside = point == "/" || resolved == point || resolved.hasPrefix(point + "/")
      if inside && point.count >= best.point.count { best = (point, String(fields[2]), String(fields[0])) }
    }
    // ext4 without a journal allocates inodes differently (it skips those
    // deleted in the last seconds), which matters to file-per-message designs.
    if best.type == "ext4", let device = best.device.split(separator: "/").last,
      let task = BenchProc.read("/sys/fs/ext4/\(device)/journal_task"), task.hasPrefix("<none>")
    {
      return "ext4 (no journal)"
    }
    return best.type
  }

  static func isoDate() -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    return formatter.string(from: Date())
  }

  static func which(_ program: String) -> String? {
    for folder in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
      let path = "\(folder)/\(program)"
      if FileManager.default.isExecutableFile(atPath: path) { return path }
    }
    return nil
  }
}
