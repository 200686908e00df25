import Foundation

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
    let listeners = try root.ownedChild(GroupLayout.listenersFolder, for: name)
    let folder = try listeners.ownedChild(name, for: name)
    let inbox = try folder.ownedChild(GroupLayout.inboxFolder, for: name)
    return ListenerFolders(listeners: listeners, folder: folder, inbox: inbox)
  }

  /// Whether each folder is still the entry it was opened as.
  func areIntact(in root: SafeDirectory, name: String) -> Bool {
    listeners.isStill(GroupLayout.listenersFolder, in: root)
      && folder.isStill(name, in: listeners)
      && inbox.isStill(GroupLayout.inboxFolder, in: folder)
  }
}
