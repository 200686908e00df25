import Foundation
import GRDB
import Logging

#if canImport(Glibc)
import Glibc
#endif

extension GroupFolder {
  /// Removes the folders that ephemeral listeners (those started without a
  /// name) of processes that died without closing them left under
  /// `listeners/`, and returns their names.
  ///
  /// A folder goes only when all of these hold, so that nothing a live or a
  /// durable listener needs is touched:
  /// - its name is an ephemeral one, `p<PID>-<8 hex digits>`, and process
  ///   PID no longer exists (so no process is creating it right now);
  /// - its lock is free (no live listener holds it);
  /// - it holds no cursor file, and no store's cursor table names it (it
  ///   keeps no durable place).
  ///
  /// ``listen(as:durable:options:)`` and ``status()`` call it. Folders of
  /// named listeners are kept: their names are the user's.
  @discardableResult
  func removeDeadEphemeralListeners() -> [String] {
    guard let listeners = try? root.child(GroupLayout.listenersFolder, create: false) else { return [] }
    var candidates: [String] = []
    try? listeners.forEachEntry { bytes in
      guard let name = String(validating: bytes, as: UTF8.self), let pid = Self.ephemeralProcessID(name),
        kill(pid, 0) != 0 && errno == ESRCH
      else { return }
      candidates.append(name)
    }
    guard !candidates.isEmpty else { return [] }
    guard let storePlaces = durablePlaceNames() else { return [] }
    var removed: [String] = []
    for name in candidates.sorted() where !storePlaces.contains(name) {
      guard let folder = try? listeners.child(name, create: false), !ListenerLock.isHeld(in: folder),
        !Self.holdsCursorFile(folder)
      else { continue }
      if listeners.remove(name) {
        Logger.groupSync.info("removed the folder of dead ephemeral listener '\(name)'")
        removed.append(name)
      }
    }
    return removed
  }

  /// The process ID in an ephemeral listener's name (`p<PID>-<8 hex>`, as
  /// ``ephemeralName()`` makes them), or nil for any other name.
  static func ephemeralProcessID(_ name: String) -> Int32? {
    let parts = name.utf8.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
    guard parts.count == 2, parts[0].first == UInt8(ascii: "p"), parts[1].count == 8,
      parts[1].allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }),
      let pid = Int32(String(decoding: parts[0].dropFirst(), as: UTF8.self)), pid > 0
    else { return nil }
    return pid
  }

  /// Whether a listener's folder holds a cursor file (`cursor`,
  /// `cursor.STORE`), whatever its state: a durable place is kept.
  private static func holdsCursorFile(_ folder: SafeDirectory) -> Bool {
    var found = false
    do {
      try folder.forEachEntry { bytes in
        let name = String(decoding: bytes, as: UTF8.self)
        if name == DurableCursor.fileName || name.hasPrefix(DurableCursor.fileName + ".") { found = true }
      }
    } catch {
      return true  // unreadable: keep it
    }
    return found
  }

  /// The names that hold a place in some writable store's cursor table.
  /// Nil when a store cannot be read: then no folder may go.
  private func durablePlaceNames() -> Set<String>? {
    var names = Set<String>()
    do {
      for store in try allStores() where !store.isReadOnly {
        try store.read { db in
          guard try db.tableExists(DurableCursor.table) else { return }
          names.formUnion(try String.fetchAll(db, sql: "SELECT name FROM \(DurableCursor.table)"))
        }
      }
    } catch {
      Logger.groupSync.error("cannot read the durable places, so no dead listener's folder is removed: \(error)")
      return nil
    }
    return names
  }
}
