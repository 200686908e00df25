import Foundation
import Logging

/// A listener's folders, `listeners/`, `listeners/NAME/` and its inbox,
/// as held open; made anew when something replaced them.
struct ListenerFolders {
  var listeners: SafeDirectory
  var folder: SafeDirectory
  var inbox: SafeDirectory

  /// Opens the folders of listener `name` in the group folder `root`,
  /// making those that are missing or not folders of the group. The inbox
  /// exists before the lock is taken: a writer that sees the lock held
  /// always finds the inbox to deliver into.
  static func open(in root: SafeDirectory, name: String) throws -> ListenerFolders {
    let listeners = try ownedFolder(GroupLayout.listenersFolder, in: root, listener: name)
    let folder = try ownedFolder(name, in: listeners, listener: name)
    let inbox = try ownedFolder(GroupLayout.inboxFolder, in: folder, listener: name)
    return ListenerFolders(listeners: listeners, folder: folder, inbox: inbox)
  }

  /// Whether each folder is still the entry it was opened as.
  func areIntact(in root: SafeDirectory, name: String) -> Bool {
    listeners.isStill(GroupLayout.listenersFolder, in: root)
      && folder.isStill(name, in: listeners)
      && inbox.isStill(GroupLayout.inboxFolder, in: folder)
  }

  /// The folder `name` of `parent`, created if missing; an entry there
  /// that is not a folder of the group (a symlink, a file, a FIFO, another
  /// device) is removed itself, never followed, and the folder made anew.
  private static func ownedFolder(_ name: String, in parent: SafeDirectory, listener: String) throws -> SafeDirectory {
    do {
      return try parent.child(name, create: true)
    } catch GroupSyncError.unsafeEntry(let path, let reason) {
      Logger.groupSync.error("listener '\(listener)': refused '\(path)' (\(reason)); replacing it")
      parent.remove(name)
      return try parent.child(name, create: true)
    }
  }
}
