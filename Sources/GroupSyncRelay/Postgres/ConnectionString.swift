// ConnectionString: a relay's libpq connection string, read from its file and shown without its password.
import CLibPQ
import Foundation
import GroupSync
#if canImport(Glibc)
import Glibc
#endif

/// The libpq connection string of a relay: read from a file only its owner
/// can read, checked for a password, and rendered without one.
///
/// A password belongs in libpq's password file (`~/.pgpass`, or the file
/// `PGPASSFILE` names) or in a connection file (``read(fromFile:)``), never
/// on a command line, where `ps` shows it to every user of the machine.
/// For example:
///
/// ```swift
/// let conninfo = try ConnectionString.read(fromFile: "/etc/groupsync/relay.conninfo")
/// var configuration = RelayConfiguration(folder: "/srv/app/group", conninfo: conninfo)
/// ```
public enum ConnectionString {
  /// The longest connection file read: a connection string is a line or
  /// two, so anything larger is not one.
  static let maximumFileSize = 64 * 1024

  /// Reads the connection string (`key=value` pairs or a URI) from the
  /// file at `path`: surrounding whitespace trimmed, lines starting with
  /// `#` skipped, the other lines joined by spaces.
  ///
  /// The file is refused, before anything connects, unless it is a regular
  /// file (a symbolic link to one is followed) whose mode gives no
  /// permission to its group or to others (0600 or less), as libpq
  /// requires of a password file.
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` naming the file and
  ///   what to do: when it is missing or unreadable, not a regular file,
  ///   open to its group or others, too large, not UTF-8, or empty.
  public static func read(fromFile path: String) throws -> String {
    // O_NONBLOCK: a FIFO put in the file's place must not hang the open.
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
    guard fd >= 0 else {
      let reason = String(cString: strerror(errno))
      throw RelayError.invalidConfiguration(
        "connection file \(path): cannot open it (\(reason)); give a file the relay's user can read")
    }
    let file = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    // The checks are made on the open file, so the file read is the one
    // checked.
    var info = stat()
    guard fstat(fd, &info) == 0 else {
      throw RelayError.system(SystemCallError(call: "fstat", path: path, errno: errno))
    }
    guard info.st_mode & S_IFMT == S_IFREG else {
      throw RelayError.invalidConfiguration(
        "connection file \(path): not a regular file (\(kind(info.st_mode))); give a file holding the connection string")
    }
    let permissions = info.st_mode & 0o777
    guard permissions & 0o077 == 0 else {
      throw RelayError.invalidConfiguration(
        "connection file \(path) has mode \(String(format: "0%03o", permissions)), which lets its group or others "
          + "read or change it, and it may hold a password: make it the owner's alone (chmod 600 \(path))")
    }
    guard info.st_size <= maximumFileSize else {
      throw RelayError.invalidConfiguration(
        "connection file \(path): \(info.st_size) bytes; a connection string takes at most \(maximumFileSize)")
    }
    let data: Data
    do {
      data = try file.read(upToCount: maximumFileSize + 1) ?? Data()
    } catch {
      throw RelayError.invalidConfiguration("connection file \(path): cannot read it (\(error))")
    }
    guard let text = String(data: data, encoding: .utf8) else {
      throw RelayError.invalidConfiguration("connection file \(path): not UTF-8 text")
    }
    let conninfo = text.split(whereSeparator: \.isNewline)
      .map { $0.trimmingCharacters(in: .whitespaces) }
      .filter { !$0.isEmpty && !$0.hasPrefix("#") }
      .joined(separator: " ")
    guard !conninfo.isEmpty else {
      throw RelayError.invalidConfiguration(
        "connection file \(path) holds no connection string; write one (host=... dbname=...) in it")
    }
    return conninfo
  }

  /// Whether `conninfo` carries a password (the `password` keyword, or a
  /// URI's `user:password@` or `?password=`), as libpq parses it.
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` when libpq cannot
  ///   parse it, with libpq's reason less anything of it that may be a
  ///   password (libpq quotes the text it stumbled on).
  public static func holdsPassword(_ conninfo: String) throws -> Bool {
    try parse(conninfo).contains { $0.keyword == "password" && !$0.value.isEmpty }
  }

  /// `conninfo` as `key=value` pairs, as libpq parses it, with the
  /// password (if any) replaced by `***`: safe to print. A string libpq
  /// cannot parse is rendered as `(unparsable)`.
  ///
  /// For example, `postgresql://app:secret@db/app` is rendered as
  /// `user='app' password='***' dbname='app' host='db'` (libpq's order).
  public static func redacted(_ conninfo: String) -> String {
    guard let options = try? parse(conninfo) else { return "(unparsable)" }
    return options.map { option in
      let value = option.keyword == "password" ? "***" : option.value
      let escaped = value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
      return "\(option.keyword)='\(escaped)'"
    }.joined(separator: " ")
  }

  /// The options `conninfo` sets, in libpq's order (no defaults added).
  ///
  /// - Throws: ``RelayError/invalidConfiguration(_:)`` with libpq's reason,
  ///   its quoted parts elided when the string may hold a password.
  static func parse(_ conninfo: String) throws -> [(keyword: String, value: String)] {
    try options(conninfo).given
  }

  /// The options `conninfo` sets, in libpq's order, and the names of those
  /// it leaves unset that libpq's environment (`PGHOST`...) sets.
  ///
  /// - Throws: as ``parse(_:)``.
  static func options(_ conninfo: String) throws -> (
    given: [(keyword: String, value: String)], fromEnvironment: Set<String>
  ) {
    var message: UnsafeMutablePointer<CChar>?
    guard let options = PQconninfoParse(conninfo, &message) else {
      let text = message.map { String(cString: $0) } ?? "out of memory"
      if let message { PQfreemem(message) }
      throw RelayError.invalidConfiguration(
        "the PostgreSQL connection string: "
          + parseFailure(text.trimmingCharacters(in: .whitespacesAndNewlines), in: conninfo))
    }
    defer { PQconninfoFree(options) }
    var given: [(keyword: String, value: String)] = []
    var fromEnvironment: Set<String> = []
    var index = 0
    while let keyword = options[index].keyword {
      let name = String(cString: keyword)
      if let value = options[index].val {
        given.append((name, String(cString: value)))
      } else if let variable = options[index].envvar, getenv(variable) != nil {
        fromEnvironment.insert(name)
      }
      index += 1
    }
    return (given, fromEnvironment)
  }

  /// libpq's reason for refusing `conninfo`, safe to print. libpq quotes
  /// the part it stumbled on, up to the whole URI (`user:password@`
  /// included), so a quoted part that overlaps what may be a password is
  /// elided. libpq could not parse the string, so that is judged on its
  /// text, erring on the safe side: everything from a `password` on, a
  /// URI's user information after its `:`, and a URI with a
  /// percent-encoded character (which may spell `password`) whole.
  static func parseFailure(_ message: String, in conninfo: String) -> String {
    let secrets = possibleSecrets(in: conninfo)
    guard !secrets.isEmpty else { return message }
    let note = " (quoted text elided: it may hold a password)"
    // A quote inside the secret would pair libpq's quotes wrongly.
    if secrets.contains(where: { $0.contains("\"") }) {
      return String(message.prefix { $0 != "\"" }) + "…" + note
    }
    var result = ""
    var elided = false
    for (index, part) in message.split(separator: "\"", omittingEmptySubsequences: false).enumerated() {
      if index > 0 { result += "\"" }
      // Odd parts are quoted. A single character (`=`, `]`) is libpq's own.
      if index % 2 == 1, part.count > 1, secrets.contains(where: { $0.contains(part) || part.contains($0) }) {
        result += "…"
        elided = true
      } else {
        result += part
      }
    }
    return elided ? result + note : result
  }

  /// The parts of an unparsable `conninfo` that may be or hold a password.
  private static func possibleSecrets(in conninfo: String) -> [Substring] {
    var secrets: [Substring] = []
    if let keyword = conninfo.range(of: "password", options: .caseInsensitive) {
      secrets.append(conninfo[keyword.lowerBound...])
    }
    if let scheme = conninfo.range(of: "://") {
      let rest = conninfo[scheme.upperBound...]
      if rest.contains("%") { secrets.append(rest) }
      let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
      if let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") {
        let password = authority[authority.index(after: colon)..<at]
        if !password.isEmpty { secrets.append(password) }
      }
    }
    return secrets
  }

  private static func kind(_ mode: mode_t) -> String {
    switch mode & S_IFMT {
    case S_IFDIR: "a directory"
    case S_IFIFO: "a FIFO"
    case S_IFSOCK: "a socket"
    case S_IFCHR, S_IFBLK: "a device"
    default: "not a file"
    }
  }
}
