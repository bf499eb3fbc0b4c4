import EntityStore
import EntityStoreSync
import Foundation
import TestSupport

print("placeholder")
