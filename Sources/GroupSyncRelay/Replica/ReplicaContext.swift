// What a replicated store's shipper and applier share: the store, its
// names in the log, its place, its caches and what it has not shipped.
import CoreMetrics
import Foundation
import GRDB
import GroupSync

/// What the shipper and the applier of one replicated store share: the
/// store, the names it goes by in PostgreSQL, and this host's places.
///
/// Used only on the relay's thread (`@unchecked Sendable` because the
/// relay hands it there once).
final class ReplicaContext: @unchecked Sendable {
  let store: Store
  /// The store's name in the group (`main`, or a named store).
  let storeName: String
  let group: String
  let host: String
  /// The key of this host's replica of the store in the shared log.
  var replica: SharedLog.Replica { SharedLog.Replica(group: group, store: storeName, host: host) }
  /// How concurrent writes are settled.
  let merge: MergeRules
  /// The log formats this relay reads and writes.
  let version: RelayVersion
  /// The format shipments are written in: the group's, or the newest this
  /// relay writes below it (see ``RelayVersion/writes(groupFormat:)``).
  var writeFormat = LogFormat.v1
  /// Set once the store meets an entry or image in a format this relay
  /// does not read: it then applies and ships nothing for the rest of the
  /// relay's life (only another build reads it), and no purge passes the
  /// position.
  var formatHold: (position: Int64, format: LogFormat)?
  /// Until when the store ships nothing, after the server refused a
  /// shipment (``RelayError/shipmentRefused(store:reason:)``), and why;
  /// it goes on applying meanwhile.
  var shippingRefused: (until: ContinuousClock.Instant, reason: String)?
  /// The author label of the relay's own local writes: change sets with it
  /// came from the log and are never shipped back.
  let author: String
  /// Relations declared to the relay (the schema's own are read from it).
  let references: [RowReference]
  /// The places, as committed locally (`shipped` may lag PostgreSQL's
  /// until the session recovered it after a crash).
  let place: ReplicaPlace
  /// The log's last position as last read or told by a notification.
  var logHead: Int64 = 0
  /// Entries past the applied place that notifications carried, by
  /// position (see ``SharedLog/Hint``).
  var carried: [Int64: SharedLog.StoredEntry] = [:]
  /// Whether the next pass reads the log from the applied place even if
  /// no notification told of an entry past it: after a connect, and on
  /// the relay's timer (a notification is a hint; the log is the truth).
  var mustReadLog = true
  /// Entries shipped and applied since the relay started.
  var shippedEntries: Int64 = 0
  var appliedEntries: Int64 = 0
  var conflicts: Int64 = 0
  /// What the relay reports through swift-metrics for this store.
  let metrics: ReplicaMetrics
  /// The store's schema version when the relay last reconciled with it
  /// (nil: not yet since it started).
  var schemaVersion: Int64?
  /// Set when the log lost this host's shipments (found on connecting):
  /// the next pass re-synchronises as after a divergence.
  var divergence: String?
  /// Set when a read of the log found it diverged while the session lived
  /// on (a pooler hid a failover from it): this host's places are read
  /// back (the relay's recovery) before the store re-synchronises, so
  /// that shipments the log lost ship again instead of being taken back.
  var placesInDoubt = false
  /// Set when an entry changed columns of a row this host does not have:
  /// the next pass re-synchronises from the rows' current images.
  var resyncReason: String?
  let emit: @Sendable (RelayEvent) -> Void
  /// Rung once the relay stops (waits give up).
  let stop: WakePipe?
  let failpoints: RelayFailpoints
  /// The steps' timestamps, when the relay keeps a trace.
  var trace: RelayTrace?

  /// Takes what `hint` tells about this store: the log reaches its
  /// position, and the entry it carries waits to be applied. At most
  /// ``carriedLimit`` entries wait; past that, the log is read instead.
  func take(_ hint: SharedLog.Hint) {
    logHead = max(logHead, hint.position)
    guard let entry = hint.entry, entry.position > place.current.applied, carried.count < Self.carriedLimit else { return }
    carried[entry.position] = entry
  }

  static let carriedLimit = 4096

  init(
    store: Store, storeName: String, group: String, host: String, merge: MergeRules,
    version: RelayVersion = .current, author: String, references: [RowReference] = [], stop: WakePipe? = nil, failpoints: RelayFailpoints = RelayFailpoints(nil),
    metricsFactory: (any MetricsFactory)? = nil, emit: @escaping @Sendable (RelayEvent) -> Void
  ) throws {
    self.store = store
    self.storeName = storeName
    self.group = group
    self.host = host
    self.merge = merge
    self.version = version
    self.author = author
    self.references = references
    self.emit = emit
    self.stop = stop
    self.failpoints = failpoints
    metrics = ReplicaMetrics(group: group, store: storeName, host: host, factory: metricsFactory)
    // The relay's tables, made or brought up to date: bookkeeping, not a
    // write its listeners are told of (the capture ignores their rows, and
    // their schema is no user's either).
    place = try store.writeBookkeeping { db in
      try GlobalIDTable.setUp(db)
      try HeldRows.setUp(db)
      try SchemaDrift.setUp(db)
      return try ReplicaPlace(db, group: group, host: host)
    }
  }

  /// Writes to the store under the relay's author label: the shipper
  /// never ships the relay's own writes back, and listeners can tell them.
  @discardableResult
  func write<T>(_ body: (Database) throws -> T) throws -> T { try writeAndReturnChangeSet(body).result }

  /// ``write(_:)``, also returning the change set it committed: nil when
  /// `body` wrote only the relay's tables, which no capture reports (a
  /// quiet commit). The place `body` changed is published once it
  /// committed. A change set right after the shipped place is skipped at
  /// once (the shipped place moves past it in memory), so the next
  /// shipment need not read the history to find it is the relay's own.
  func writeAndReturnChangeSet<T>(_ body: (Database) throws -> T) throws -> (result: T, changeSet: ChangeSet?) {
    let written: (result: T, changeSet: ChangeSet?)
    do {
      written = try store.writeAndReturnChangeSet(author: author, body)
    } catch {
      place.discard()
      throw error
    }
    place.publish()
    skipOwn(written.changeSet)
    return written
  }

  /// Counts `count` entries applied here.
  func countApplied(_ count: Int) {
    appliedEntries += Int64(count)
    metrics.applied.increment(by: count)
  }

  /// Tells of a conflict settled (or seen settled in an entry applied
  /// here): counted, by rule, and emitted.
  func tell(_ conflict: ConflictRecord) {
    conflicts += 1
    metrics.conflict(rule: conflict.rule.rawValue)
    emit(.conflict(conflict))
  }

  /// Moves the shipped place past `changeSet`, the relay's own, when it is
  /// the next one.
  func skipOwn(_ changeSet: ChangeSet?) {
    if let sequence = changeSet?.sequence, sequence == place.current.shipped + 1 { place.pass { $0.shipped = sequence } }
  }

  /// Clears GRDB's schema cache of the writer connection `db` when another
  /// process changed the schema since this relay last looked: GRDB
  /// refreshes a pool's readers by itself, not its writer. Clearing it on
  /// every transaction would also drop every cached statement.
  func refreshSchemaCache(_ db: Database) throws {
    let version = try StoreSchema.version(db)
    guard version != writerSchemaVersion else { return }
    db.clearSchemaCache()
    writerSchemaVersion = version
  }

  private var writerSchemaVersion: Int64?

  /// The store's references as of its schema now: read again only when the
  /// schema version moved (every shipment and every apply asks).
  func referenceGraph(_ db: Database) throws -> ReferenceGraph {
    let version = try StoreSchema.version(db)
    if let cached = graphCache, cached.version == version { return cached.graph }
    let graph = try ReferenceGraph.read(db, declared: references)
    graphCache = (version, graph)
    return graph
  }

  private var graphCache: (version: Int64, graph: ReferenceGraph)?

  /// The shape of `table` as of the store's schema `version` (read in the
  /// same transaction as `db`): looked up again only when the schema moved.
  func shape(of table: String, version: Int64, _ db: Database) throws -> TableShape.Lookup {
    if shapeCache.version != version { shapeCache = (version, [:]) }
    if let known = shapeCache.shapes[table] { return known }
    let lookup = try TableShape.lookUp(db, table: table)
    shapeCache.shapes[table] = lookup
    return lookup
  }

  private var shapeCache: (version: Int64, shapes: [String: TableShape.Lookup]) = (-1, [:])

  /// The tables whose keys are each host's own (`table.column` of their
  /// `INTEGER PRIMARY KEY`, or `table.rowid`), the references translated
  /// to them, and the integer columns named `*_id` (or `*Id`) that no
  /// reference covers.
  func identities() throws -> RelayEvent {
    try store.read { db in
      let graph = try referenceGraph(db)
      var keys: [String] = []
      var translated: [String] = []
      var suspects: [String] = []
      for table in try TableShape.userTables(db) {
        guard let shape = (try? TableShape.read(db, table: table, store: storeName)) ?? nil else { continue }
        keys.append("\(table).\(shape.rowIDColumn ?? "rowid")")
        let covered = Set(graph.references(from: table).map { $0.column.lowercased() })
        translated += graph.references(from: table).map { "\($0.table).\($0.column)→\($0.parent)" }
        // Foreign keys to other columns than a rowid travel as they are.
        let otherKeys = graph.foreignKeyColumns[table] ?? []
        for column in try db.columns(in: table, in: "main") {
          let name = column.name
          let looksLikeReference = name.lowercased().hasSuffix("_id") || (name.hasSuffix("Id") && name.count > 2)
          let integer = column.type.uppercased().contains("INT") || column.type.isEmpty
          if looksLikeReference, integer, name != shape.rowIDColumn, !covered.contains(name.lowercased()),
            !otherKeys.contains(name.lowercased())
          {
            suspects.append("\(table).\(name)")
          }
        }
      }
      return .identities(store: storeName, localKeys: keys, references: translated, suspects: suspects)
    }
  }

  /// The declared references this store has no table or column for.
  func unknownReferences() -> [RowReference] {
    (try? store.read { db in try referenceGraph(db).unknown }) ?? []
  }

  /// The rows changed locally and not shipped yet, read inside `db`'s
  /// transaction: rowids by table, and tables changed as a whole (or every
  /// table, when the history no longer reaches back to the shipped place).
  struct Unshipped {
    var rows: [String: Set<Int64>] = [:]
    var wholeTables: Set<String> = []
    var everything = false
    var changeSets = 0
    var head: Int64 = 0
    /// The notes of the unshipped change sets, in commit order.
    var notes: [ShippedNote] = []

    /// Whether this host changed row `rowID` of `table` (nil: a row it
    /// does not have) since its last shipment, as far as it can tell.
    func isDirty(table: String, rowID: Int64?) -> Bool {
      if everything || wholeTables.contains(table) { return true }
      guard let rowID else { return false }
      return rows[table]?.contains(rowID) ?? false
    }

    /// Whether this host's change to the row `mapping` names waits to ship
    /// (so a remote image of it is held, to be settled against that
    /// change). A row it has not (a tombstone) is never held: a table
    /// shipped whole ships only the rows the host has.
    func holds(_ mapping: GlobalIDTable.Entry?, table: String) -> Bool {
      guard let rowID = mapping?.rowID else { return false }
      return isDirty(table: table, rowID: rowID)
    }
  }

  func unshipped(_ db: Database) throws -> Unshipped {
    var result = Unshipped()
    result.head = try store.currentSequence(in: db)
    guard result.head > place.current.shipped else { return result }
    if let oldest = try store.oldestHistorySequence(in: db), oldest > place.current.shipped + 1 {
      // Purged before it was shipped: which rows changed is unknown.
      result.everything = true
    }
    var after = place.current.shipped
    while after < result.head {
      let entries = try store.history(after: after, limit: 1000, in: db)
      guard let last = entries.last else { break }
      for entry in entries where entry.author != author {
        result.changeSets += 1
        switch entry.changeSet {
        case .success(let changeSet):
          result.notes += changeSet.notes.map { ShippedNote(name: $0.name, payload: Data($0.payload)) }
          for (table, changes) in changeSet.tables where !TableShape.isInternal(table.name) {
            result.rows[table.name, default: []].formUnion(changes.inserted + changes.updated + changes.deleted)
          }
          for table in changeSet.invalidatedTableNames where !TableShape.isInternal(table.name) {
            result.wholeTables.insert(table.name)
          }
        case .failure:
          result.everything = true
        }
      }
      after = last.sequence
    }
    return result
  }
}
