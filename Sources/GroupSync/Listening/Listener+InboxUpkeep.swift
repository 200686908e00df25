// Upkeep of the listener's folders and inbox, on rescan ticks: folders
// replaced, stores created, inbox listings, and the resets they call for.
import Foundation
import Logging

extension Listener {
  /// Resets every store: the inbox as a whole cannot be trusted.
  func resetAll(_ reason: ResetReason) -> Reset {
    Logger.groupSync.error("listener '\(name)': \(reason); resetting every store")
    let folder = inbox.folder
    try? folder.forEachEntry { folder.remove($0) }
    for sequencer in sequencers { _ = sequencer.reset(reason, removingInboxFiles: false, logged: true) }
    mainStoreNextSequence.store(sequencers[0].nextSequence, ordering: .relaxed)
    mailbox.dropInProcess(before: sequencers.map { ($0.store, $0.nextSequence) })
    let reset = Reset(reason, sequence: sequencers[0].nextSequence - 1)
    metrics.resetAll(reset, sequencers: sequencers)
    return reset
  }

  /// On each rescan tick: a store created since the listener started gets
  /// a sequencer (from its first change set on).
  func discoverStores() {
    guard let entries = try? directory.entries(), entries.count != sequencers.count
      || zip(entries, sequencers).contains(where: { $0.name != $1.store })
    else { return }
    for entry in entries where sequencer(named: entry.name) == nil {
      do {
        let store = try directory.store(named: entry.name)
        // A store that could not be opened at start existed then.
        sequencers.append(try makeSequencer(store, fromStart: !unopenable.contains(entry.name)))
        unopenable.remove(entry.name)
        Logger.groupSync.info("listener '\(name)': now listening to store '\(entry.name)'")
      } catch {
        if unopenable.insert(entry.name).inserted {
          Logger.groupSync.error("listener '\(name)': cannot open store '\(entry.name)': \(error)")
        }
      }
    }
  }

  /// On each rescan tick: are `listeners/`, the listener's folder and its
  /// inbox still the folders it holds? If anything replaced or removed
  /// them, they are made anew and watched (``OwnedInbox/remakeIfReplaced()``),
  /// and every store resets once.
  func checkFolders() -> Reset? {
    switch inbox.remakeIfReplaced() {
    case .intact, .closed: return nil
    case .remade: return resetAll(.foldersReplaced)
    case .unrecoverable(let error): return resetAll(.foldersUnrecoverable(error: "\(error)"))
    }
  }

  /// Lists the inbox, streaming, with bounded work. Foreign entries are
  /// removed and cause one reset, as does an overflowing inbox (cleared).
  func scanInbox() -> Reset? {
    var foreign: [String] = []
    var foreignCount = 0
    var waitingCount = 0
    for sequencer in sequencers { sequencer.forgetInbox() }  // the listing is the authority; events are hints
    let folder = inbox.folder
    let started = ContinuousClock.now
    var rediscovered = false
    var arrivals = ArrivalRange()
    do {
      try folder.forEachEntry { fileName in
        guard let (store, sequence) = GroupLayout.storeAndSequence(inFileNameBuffer: fileName) else {
          foreignCount += 1
          arrivals.add(folder.changeTime(fileName))
          if foreign.count < 5 { foreign.append(SafeDirectory.printable(fileName)) }
          folder.remove(fileName)
          return
        }
        var sequencer = self.sequencer(named: store)
        if sequencer == nil && !rediscovered {
          // A store made after the listener started, maybe: look once.
          rediscovered = true
          discoverStores()
          sequencer = self.sequencer(named: store)
        }
        guard let sequencer else {
          foreignCount += 1
          arrivals.add(folder.changeTime(fileName))
          if foreign.count < 5 { foreign.append(SafeDirectory.printable(fileName) + " (no such store)") }
          folder.remove(fileName)
          return
        }
        if sequence < sequencer.nextSequence {
          folder.remove(fileName)  // already delivered or covered by a reset
        } else {
          waitingCount += 1
          sequencer.track(sequence)
        }
      }
    } catch {
      return resetAll(.inboxUnlistable(error: "\(error)"))
    }
    if waitingCount > options.maximumBacklog {
      let reason = ResetReason.inboxOverflowed(waiting: waitingCount, maximum: options.maximumBacklog)
      guard hostileActs.continues(lookStarted: started) else { return resetAll(reason) }
      // Cleared without another reset: what was committed is read from the
      // history as the gaps it leaves come up.
      Logger.groupSync.warning("listener '\(name)': \(reason); cleared (bad input again)")
      try? folder.forEachEntry { folder.remove($0) }
      for sequencer in sequencers { sequencer.forgetInbox() }
    }
    if foreignCount > 0 {
      let reason = ResetReason.foreignEntries(names: foreign.sorted(), more: foreignCount - foreign.count)
      guard hostileActs.continues(lookStarted: started, arrived: arrivals.range) else { return resetAll(reason) }
      Logger.groupSync.warning("listener '\(name)': \(reason) (bad input again)")
    }
    return nil
  }

}
