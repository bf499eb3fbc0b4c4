import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One progress line on stderr for long work (import, export to a file, check): done/total, the rate and the time
/// left, redrawn in place at most ten times a second, and cleared at the end. Shown only when stderr is a terminal
/// and `--quiet` is not given: a script's stderr gets nothing.
final class ProgressLine {
    private let label: String
    private let unit: String
    private let err: (String) -> Void
    private let start = ProgressLine.now()
    private var drawn = 0.0
    private var shown = false
    var total: Int

    /// A line for `label` counting `unit`s; nil when it would not be shown.
    init?(_ label: String, unit: String, total: Int, invocation: Invocation, err: @escaping (String) -> Void) {
        guard isatty(2) == 1, !invocation.flags.contains("--quiet") else { return nil }
        self.label = label
        self.unit = unit
        self.total = total
        self.err = err
    }

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// `done` of ``total``: redrawn if a tenth of a second has passed since the last drawing.
    func update(_ done: Int) {
        let now = Self.now()
        guard now - drawn >= 0.1 else { return }
        drawn = now
        shown = true
        let elapsed = max(now - start, 1e-6)
        let rate = Double(done) / elapsed
        var text = "\r\(label): \(done)/\(total) \(unit)"
        if done > 0 && elapsed >= 0.5 {
            text += String(format: ", %.0f/s", rate)
            if total > done { text += ", \(Self.duration(Double(total - done) / rate)) left" }
        }
        err(text + "\u{1B}[K")
    }

    /// Clears the line.
    func finish() {
        if shown { err("\r\u{1B}[K") }
    }

    static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded(.up))
        return whole < 60
            ? "\(whole) s"
            : whole < 3_600 ? "\(whole / 60) min \(whole % 60) s" : "\(whole / 3_600) h \(whole / 60 % 60) min"
    }
}
