import Foundation
import GroupSyncTestSupport
import Testing

/// The landing page's "Layout of the code" lists every target and every
/// source folder, and names no folder that is gone: a folder or target
/// added, moved or removed without the page fails here.
@Suite(.timed) struct LayoutPageTests {
  /// The package's root, from this file's path (Tests/GroupSyncTests/).
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

  /// The page's layout block: its lines between the fences after the
  /// heading.
  static func layoutBlock() throws -> [String] {
    let page = try String(contentsOfFile: root + "/Sources/GroupSync/GroupSync.docc/GroupSync.md", encoding: .utf8)
    let lines = page.components(separatedBy: "\n")
    let heading = try #require(lines.firstIndex(of: "### Layout of the code"), "the page has the heading")
    let open = try #require(lines[heading...].firstIndex { $0.hasPrefix("```") })
    let close = try #require(lines[(open + 1)...].firstIndex { $0.hasPrefix("```") })
    return Array(lines[(open + 1)..<close])
  }

  /// The lines of the block that describe `top` (a line starting with it,
  /// and the indented lines after it).
  static func section(_ top: String, in block: [String]) -> [String] {
    guard let start = block.firstIndex(where: { $0.hasPrefix(top) }) else { return [] }
    var lines = [block[start]]
    for line in block[(start + 1)...] {
      guard line.hasPrefix(" ") else { break }
      lines.append(line)
    }
    return lines
  }

  static func directories(_ path: String) -> [String] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
    return names.filter { name in
      var isDirectory: ObjCBool = false
      return !name.hasPrefix(".") && !name.hasSuffix(".docc")
        && FileManager.default.fileExists(atPath: path + "/" + name, isDirectory: &isDirectory) && isDirectory.boolValue
    }.sorted()
  }

  /// The folders below `path` that hold source files, relative to it.
  static func sourceFolders(below path: String) -> [String] {
    directories(path).flatMap { name -> [String] in
      let nested = sourceFolders(below: path + "/" + name).map { name + "/" + $0 }
      let files = (try? FileManager.default.contentsOfDirectory(atPath: path + "/" + name)) ?? []
      let holdsSources = files.contains { file in [".swift", ".c", ".h"].contains { file.hasSuffix($0) } }
      return (holdsSources ? [name] : []) + nested
    }
  }

  @Test func everyTargetAndSourceFolderIsListed() throws {
    let block = try Self.layoutBlock()
    var missing: [String] = []
    for top in ["Sources", "Tests"] {
      for target in Self.directories(Self.root + "/" + top) {
        let section = Self.section("\(top)/\(target)/", in: block)
        if section.isEmpty {
          missing.append("\(top)/\(target)/")
          continue
        }
        for folder in Self.sourceFolders(below: "\(Self.root)/\(top)/\(target)")
        where top == "Sources" && !section.dropFirst().contains(where: { $0.contains(" \(folder)/ ") }) {
          missing.append("\(top)/\(target)/\(folder)/")
        }
      }
    }
    for top in ["CSupport/", "Benchmarks/"] where Self.section(top, in: block).isEmpty { missing.append(top) }
    #expect(missing.isEmpty, "the layout page lacks \(missing.joined(separator: ", "))")
  }

  @Test func everyTargetOfThePackageIsOnThePage() throws {
    let block = try Self.layoutBlock().joined(separator: "\n")
    let manifest = try String(contentsOfFile: Self.root + "/Package.swift", encoding: .utf8)
    let kinds = [".target(", ".executableTarget(", ".testTarget(", ".systemLibrary("]
    var missing: [String] = []
    var chunks = [Substring(manifest)]
    for kind in kinds {
      chunks = chunks.flatMap { chunk in chunk.components(separatedBy: kind).map { Substring($0) } }
    }
    for chunk in chunks.dropFirst() {
      guard let name = Self.quoted(after: "name:", in: chunk) else { continue }
      let path = Self.quoted(after: "path:", in: chunk)
      let named = block.contains("/\(name)/") || block.contains(name + " ") || path.map { block.contains($0) } ?? false
      if !named { missing.append(name) }
    }
    #expect(missing.isEmpty, "targets missing from the layout page: \(missing.joined(separator: ", "))")
  }

  @Test func everyFolderThePageNamesExists() throws {
    let block = try Self.layoutBlock()
    var gone: [String] = []
    for target in Self.directories(Self.root + "/Sources") {
      for line in Self.section("Sources/\(target)/", in: block).dropFirst() {
        // A folder line: two spaces, the folder's name and a slash.
        let trimmed = line.dropFirst(2)
        guard line.hasPrefix("  "), !trimmed.hasPrefix(" "), let slash = trimmed.firstIndex(of: "/") else { continue }
        let folder = String(trimmed[..<slash])
        var isDirectory: ObjCBool = false
        let path = "\(Self.root)/Sources/\(target)/\(folder)"
        if !FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) || !isDirectory.boolValue {
          gone.append("Sources/\(target)/\(folder)/")
        }
      }
    }
    #expect(gone.isEmpty, "the layout page names folders that do not exist: \(gone.joined(separator: ", "))")
  }

  /// The first string literal after `key` in `text`.
  static func quoted(after key: String, in text: Substring) -> String? {
    guard let keyRange = text.range(of: key), let open = text[keyRange.upperBound...].firstIndex(of: "\"") else {
      return nil
    }
    let rest = text[text.index(after: open)...]
    return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
  }
}
