/// Sorts plain 64-bit words in place, ascending.
///
/// The controller and the diff sort their batches as words (a key above the element's place): a few hundred to a
/// few thousand per batch. The standard library's sort took ~190 instructions per word at that size; a radix sort
/// over the bytes the words use takes a pass per byte (a count and a scatter) and no comparison, so a thousand words
/// of 27 bits cost four passes. Small arrays take an insertion sort.
@inlinable
package func sortWords(_ words: inout [UInt64]) {
    let count = words.count
    guard count > 1 else { return }
    if count <= 32 {
        words.withUnsafeMutableBufferPointer { buffer in
            for i in 1..<count {
                let word = buffer[i]
                var j = i
                while j > 0 && buffer[j - 1] > word {
                    buffer[j] = buffer[j - 1]
                    j -= 1
                }
                buffer[j] = word
            }
        }
        return
    }
    var highest: UInt64 = 0
    for word in words { highest |= word }
    let bytes = (UInt64.bitWidth - highest.leadingZeroBitCount + 7) / 8
    guard bytes > 0 else { return }
    var scratch = [UInt64](repeating: 0, count: count)
    var counts = [Int](repeating: 0, count: 256)
    words.withUnsafeMutableBufferPointer { source in
        scratch.withUnsafeMutableBufferPointer { target in
            counts.withUnsafeMutableBufferPointer { counts in
                var from = source
                var to = target
                for byte in 0..<bytes {
                    let shift = UInt64(byte * 8)
                    for i in 0..<256 { counts[i] = 0 }
                    for word in from { counts[Int(truncatingIfNeeded: word >> shift) & 0xFF] += 1 }
                    var total = 0
                    for i in 0..<256 {
                        let here = counts[i]
                        counts[i] = total
                        total += here
                    }
                    for word in from {
                        let digit = Int(truncatingIfNeeded: word >> shift) & 0xFF
                        to[counts[digit]] = word
                        counts[digit] += 1
                    }
                    swap(&from, &to)
                }
                // After an odd number of passes the sorted words are in the scratch buffer.
                if bytes % 2 == 1 { source.baseAddress!.update(from: target.baseAddress!, count: count) }
            }
        }
    }
}
