import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What a relay (the bridge of a group folder to other hosts, in the
/// `GroupSyncRelay` product) last said about itself, as it keeps it in
/// `GROUP/relays/HOST.json`. It lives in the core library so that
/// `groupsync status` shows relays without linking the PostgreSQL client.
public struct RelayStatus: Sendable, Codable, Equatable {
  /// One replicated store.
  public struct StoreStatus: Sendable, Codable, Equatable {
    public var name: String
    /// The store's last local sequence, and the last one shipped.
    public var localSequence: Int64
    public var shipped: Int64
    /// Local change sets not shipped yet (the relay's own applies excluded).
    public var unshipped: Int64
    /// The shared log's newest position, and the last one applied here.
    public var logHead: Int64
    public var applied: Int64
    /// How far this host is behind the log, in entries and in seconds (the
    /// age of the oldest entry not applied yet; 0 when caught up).
    public var lagChangeSets: Int64
    public var lagSeconds: Double
    /// Conflicts seen since the relay started.
    public var conflicts: Int64
    /// Row images waiting for a row a reference in them names (nil: a
    /// relay that did not count them).
    public var heldRows: Int64?
    /// Where the store holds, and the log format it holds for: an entry
    /// in a format this relay does not read (nil: it does not hold).
    public var heldAt: Int64?
    public var heldFormat: Int?

    public init(
      name: String, localSequence: Int64, shipped: Int64, unshipped: Int64, logHead: Int64, applied: Int64,
      lagChangeSets: Int64, lagSeconds: Double, conflicts: Int64, heldRows: Int64? = nil, heldAt: Int64? = nil,
      heldFormat: Int? = nil
    ) {
      self.name = name
      self.localSequence = localSequence
      self.shipped = shipped
      self.unshipped = unshipped
      self.logHead = logHead
      self.applied = applied
      self.lagChangeSets = lagChangeSets
      self.lagSeconds = lagSeconds
      self.conflicts = conflicts
      self.heldRows = heldRows
      self.heldAt = heldAt
      self.heldFormat = heldFormat
    }
  }

  public var host: String
  public var group: String
  public var processID: Int32
  /// Whether the relay had a working connection to PostgreSQL.
  public var isConnected: Bool
  /// Whether a live relay holds the lock file (set by the reader, from the
  /// lock, not from what the relay wrote).
  public var isLive: Bool
  /// The last error, until the next success.
  public var lastError: String?
  /// When the relay wrote this, in ns since 1970.
  public var updatedAtNanoseconds: Int64
  public var stores: [StoreStatus]
  /// Log entries this relay shipped and applied since it started (nil: a
  /// relay that did not count them).
  public var shippedEntries: Int64?
  public var appliedEntries: Int64?
  /// Round trips to PostgreSQL since it started: all of them, those of
  /// its shipments, and those of reading and applying the log (its
  /// bookkeeping of applied places included). Recovery, status and
  /// connecting make up the rest.
  public var roundTrips: Int64?
  public var shippingRoundTrips: Int64?
  public var applyingRoundTrips: Int64?
  /// The relay's version and the log formats it reads (nil: a relay from
  /// before formats were versioned, which reads format 1).
  public var relayVersion: String?
  public var formatsRead: [Int]?
  /// The group's log format as the relay last learned it, and the format
  /// it writes (nil: not known yet).
  public var groupFormat: Int?
  public var writeFormat: Int?
  /// The rules the relay settles concurrent writes by (its merge rules'
  /// fingerprint), and the other members that announce other rules, by
  /// host: while there is any, the relay ships nothing (nil: a relay
  /// before merge rules, or none known yet).
  public var mergeRules: String?
  public var differingMergeRules: [String: String]?
  /// How the relay learns of other hosts' shipments: `notify` or `poll`
  /// (nil: a relay before transports, which notifies).
  public var transport: String?
  /// The poll transport's interval, in seconds (nil: notify).
  public var pollIntervalSeconds: Double?

  public init(
    host: String, group: String, processID: Int32, isConnected: Bool, isLive: Bool, lastError: String?,
    updatedAtNanoseconds: Int64, stores: [StoreStatus]
  ) {
    self.host = host
    self.group = group
    self.processID = processID
    self.isConnected = isConnected
    self.isLive = isLive
    self.lastError = lastError
    self.updatedAtNanoseconds = updatedAtNanoseconds
    self.stores = stores
  }
}

/// `GROUP/relays/`: a status file per relay (`HOST.json`, replaced whole
/// by rename so a reader never sees half of one) and a lock file per relay
/// (`HOST.lock`), held by the live relay for its whole life with an OFD
/// lock that dies with it.
public enum RelayStatusFile {
  static let folderName = "relays"

  /// Host names: 1-64 letters, digits, `-`, `_` or `.`, not starting with
  /// `.` (they name files).
  public static func isValidHostName(_ name: String) -> Bool { GroupLayout.isValidListenerName(name) }

  /// Writes `status` as `relays/HOST.json` of the group folder at `group`.
  public static func write(_ status: RelayStatus, group: String) throws {
    let folder = try makeFolder(group)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    let bytes = try encoder.encode(status)
    let temporary = folder + "/.\(status.host).json.tmp"
    let fd = try System.open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0o644)
    do {
      try bytes.withUnsafeBytes { try System.writeAll(fd, $0, path: temporary) }
      System.close(fd)
    } catch {
      System.close(fd)
      throw error
    }
    try System.call("rename", temporary) { rename(temporary, folder + "/\(status.host).json") }
  }

  /// Every relay's last status, by host name, each marked live or not by
  /// its lock.
  public static func readAll(group: String) -> [RelayStatus] {
    let folder = group + "/" + folderName
    let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
    return names.filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.sorted().compactMap { name in
      guard let data = FileManager.default.contents(atPath: folder + "/" + name),
        var status = try? JSONDecoder().decode(RelayStatus.self, from: data)
      else { return nil }
      status.isLive = isHeld(folder + "/" + status.host + ".lock")
      return status
    }
  }

  /// Takes `relays/HOST.lock` for this process's life (until the returned
  /// lock is released or the process ends); nil when another live relay
  /// holds it. The relay checked `host` (``isValidHostName(_:)``).
  package static func lock(group: String, host: String) throws -> RelayLock? {
    precondition(isValidHostName(host), "a relay's host name was checked before its lock is taken")
    let path = try makeFolder(group) + "/\(host).lock"
    let file = FileDescriptor(adopting: try System.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK, 0o644))
    guard try FileLock.tryLock(file, path: path) else { return nil }
    return RelayLock(descriptor: file)
  }

  static func isHeld(_ path: String) -> Bool {
    guard let fd = try? System.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) else { return false }
    return FileLock.isLocked(FileDescriptor(adopting: fd))
  }

  private static func makeFolder(_ group: String) throws -> String {
    let folder = group + "/" + folderName
    if mkdir(folder, 0o755) != 0 && errno != EEXIST {
      throw GroupSyncError.system(call: "mkdir", path: folder, errno: errno)
    }
    return folder
  }
}

/// A relay's lock file, held until released or the process ends.
public final class RelayLock: Sendable {
  private let descriptor: Locked<FileDescriptor?>

  init(descriptor: FileDescriptor) { self.descriptor = Locked(descriptor) }

  /// Releases the lock at once (an `F_OFD_SETLK` unlock: a child process
  /// being started holds a copy of its descriptor until its exec), and
  /// closes it.
  public func release() {
    descriptor.withLock { descriptor in
      if let held = descriptor { FileLock.unlock(held) }
      descriptor = nil
    }
  }
}
