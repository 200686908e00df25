import CLibPQ
import Foundation

/// One libpq connection (`PGconn`), used by one thread: the relay's.
///
/// Every statement goes through ``execute(_:_:)`` with parameters sent
/// apart from the SQL text (`PQexecParams`), and every failure becomes a
/// ``RelayError`` naming the libpq call. Notifications are read without
/// blocking (`PQconsumeInput`, `PQnotifies`) after the relay's `poll` on
/// ``socket`` said there is input.
///
/// `@unchecked Sendable`: libpq connections may move between threads but
/// must not be used by two at once; the relay uses it from its thread only
/// and closes it there.
final class PostgresConnection: @unchecked Sendable {
  private let connection: OpaquePointer

  /// Connects with `conninfo` (libpq's `key=value` string or URI).
  ///
  /// - Throws: ``RelayError/postgres(call:message:sqlState:)`` naming
  ///   `PQconnectdb` when the server cannot be reached or refuses.
  init(conninfo: String) throws {
    guard let connection = PQconnectdb(conninfo) else {
      throw RelayError.postgres(call: "PQconnectdb", message: "out of memory", sqlState: nil)
    }
    guard PQstatus(connection) == CONNECTION_OK else {
      let message = String(cString: PQerrorMessage(connection))
      PQfinish(connection)
      throw RelayError.postgres(call: "PQconnectdb", message: message, sqlState: nil)
    }
    self.connection = connection
  }

  deinit { PQfinish(connection) }

  /// Whether libpq still considers the connection good.
  var isConnected: Bool { PQstatus(connection) == CONNECTION_OK }

  /// The connection's socket, for `poll`.
  var socket: Int32 { PQsocket(connection) }

  /// The backend's process ID (to terminate it in tests).
  var backendProcessID: Int32 { PQbackendPID(connection) }

  /// Runs one statement with text parameters (nil is NULL) and returns its
  /// rows as text (nil for NULL).
  ///
  /// - Throws: ``RelayError/postgres(call:message:sqlState:)`` naming
  ///   `PQexecParams`, with the server's SQLSTATE.
  @discardableResult
  func execute(_ sql: String, _ parameters: [String?] = []) throws -> [[String?]] {
    let result = try withCStrings(parameters) { pointers in
      PQexecParams(connection, sql, Int32(parameters.count), nil, pointers, nil, nil, 0)
    }
    guard let result else {
      throw RelayError.postgres(
        call: "PQexecParams", message: String(cString: PQerrorMessage(connection)), sqlState: nil)
    }
    defer { PQclear(result) }
    let status = PQresultStatus(result)
    guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
      let message = String(cString: PQresultErrorMessage(result))
      let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
      throw RelayError.postgres(
        call: "PQexecParams", message: message.isEmpty ? String(cString: PQerrorMessage(connection)) : message,
        sqlState: state)
    }
    let rowCount = PQntuples(result), columnCount = PQnfields(result)
    var rows: [[String?]] = []
    rows.reserveCapacity(Int(rowCount))
    for row in 0..<rowCount {
      var values: [String?] = []
      values.reserveCapacity(Int(columnCount))
      for column in 0..<columnCount {
        if PQgetisnull(result, row, column) == 1 {
          values.append(nil)
        } else {
          values.append(String(cString: PQgetvalue(result, row, column)))
        }
      }
      rows.append(values)
    }
    return rows
  }

  /// Runs `body` in a transaction: COMMIT when it returns, ROLLBACK when it
  /// throws (a ROLLBACK that fails too is ignored: the connection is then
  /// broken and the server rolls back itself).
  func transaction<T>(_ body: () throws -> T) throws -> T {
    try execute("BEGIN")
    do {
      let result = try body()
      try execute("COMMIT")
      return result
    } catch {
      _ = try? execute("ROLLBACK")
      throw error
    }
  }

  /// Reads what the server sent and returns the notifications received
  /// (channel and payload), without blocking.
  ///
  /// - Throws: naming `PQconsumeInput` when the connection broke.
  func notifications() throws -> [(channel: String, payload: String)] {
    guard PQconsumeInput(connection) == 1 else {
      throw RelayError.postgres(
        call: "PQconsumeInput", message: String(cString: PQerrorMessage(connection)), sqlState: nil)
    }
    var received: [(String, String)] = []
    while let notify = PQnotifies(connection) {
      received.append((String(cString: notify.pointee.relname), String(cString: notify.pointee.extra)))
      PQfreemem(notify)
    }
    return received
  }

  private func withCStrings<R>(
    _ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R
  ) throws -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = []
    pointers.reserveCapacity(strings.count)
    defer { for pointer in pointers { free(pointer) } }
    for string in strings {
      guard let string else {
        pointers.append(nil)
        continue
      }
      guard let copy = strdup(string) else {
        throw RelayError.system(call: "strdup", path: nil, errno: errno)
      }
      pointers.append(copy)
    }
    return body(pointers.map { $0.map { UnsafePointer($0) } })
  }
}

/// PostgreSQL array literals for `ANY($1::text[])` and `unnest`.
enum PostgresArray {
  /// `{"a","b",NULL}`: every element quoted, `"` and `\` escaped.
  static func literal(_ values: [String?]) -> String {
    var text = "{"
    for (index, value) in values.enumerated() {
      if index > 0 { text += "," }
      guard let value else {
        text += "NULL"
        continue
      }
      text += "\""
      for character in value.unicodeScalars {
        if character == "\"" || character == "\\" { text += "\\" }
        text.unicodeScalars.append(character)
      }
      text += "\""
    }
    return text + "}"
  }
}
