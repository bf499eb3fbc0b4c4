import Foundation
import TestSupport
import Testing

@testable import StoreInspectCore

/// The export's dates without a formatter per cell agree with Foundation's ISO 8601 formatter, both ways.
@Suite struct CivilTimeTests {
    @Test func datesAgreeWithFoundationsFormatterBothWays() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        var g = SeededGenerator(seed: 0xDA7E)
        // 1600-01-01 to 9999-12-31, whole seconds, plus the edges and leap days.
        let low = -11_676_096_000.0, high = 253_402_300_799.0
        var samples = [low, high, 0, -1, 951_782_400, 951_868_799, 4_107_542_400]
        for _ in 0..<TestScale.size(5_000, stress: 100_000) {
            samples.append(Double(Int64.random(in: Int64(low)...Int64(high), using: &g)))
        }
        for seconds in samples {
            let date = Date(timeIntervalSince1970: seconds)
            let expected = formatter.string(from: date)
            #expect(CivilTime.text(ofSecondsSince1970: seconds) == expected, "\(seconds)")
            #expect(CivilTime.secondsSince1970(of: expected) == Int64(seconds), "\(expected)")
        }
    }

    @Test func textThatIsNotADateIsLeftToTheFormatter() {
        for text in [
            "2025-02-29T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:60:00Z",
            "2024-01-01 00:00:00Z", "2024-01-01T00:00:00", "1599-12-31T23:59:59Z", "+2024-01-01T00:00:00Z",
            "2024-1-01T00:00:00Z", "２０２４-01-01T00:00:00Z",
        ] {
            #expect(CivilTime.secondsSince1970(of: text) == nil, "\(text)")
        }
        #expect(CivilTime.secondsSince1970(of: "2024-02-29T23:59:59Z") == 1_709_251_199)
        #expect(CivilTime.text(ofSecondsSince1970: 0.5) == nil)
        #expect(CivilTime.text(ofSecondsSince1970: -11_676_096_001) == nil)  // 1599
    }
}

/// A date's text in integers is the text decimal arithmetic gives, and reads back to the same date.
@Suite struct ExactSecondsTests {
    @Test func aDoublesDecimalMovesBetweenTheEpochsExactly() {
        let cases: [(Double, Int64, String)] = [
            (-12.25, -13, "75"), (785_212_161.123456, 785_212_161, "123456"), (1e-05, 0, "00001"),
            (-1e-05, -1, "99999"),
            (10_000_000_000, 10_000_000_000, ""), (-3, -3, ""), (0.1, 0, "1"), (-0.5, -1, "5"),
        ]
        for (value, whole, fraction) in cases {
            let exact = ExactSeconds(description: "\(value)")
            #expect(
                exact?.whole == whole && exact.map { String(decoding: $0.fraction, as: UTF8.self) } == fraction,
                "\(value)")
        }
        #expect(ExactSeconds(description: "1.5e+20") == nil)
    }

    @Test func datesRoundTripThroughTheirText() {
        var g = SeededGenerator(seed: 0x5EC5)
        var dates: [Double] = [0, -0.0, 0.1, -12.25, 1e-7, -1e-7, 978_307_200.5, -978_307_200.25, 8e9 + 0.001]
        for _ in 0..<TestScale.size(5_000, stress: 100_000) {
            let seconds = Double.random(in: -1.2e10...2.5e11, using: &g)
            dates.append(
                Bool.random(using: &g)
                    ? seconds : seconds.rounded() + Double(Int.random(in: 0..<1000, using: &g)) / 1000)
        }
        for seconds in dates {
            let date = Date(timeIntervalSinceReferenceDate: seconds)
            let text = Cell.iso8601(date)
            #expect(text == Cell.iso8601ByDecimal(date), "\(seconds)")
            #expect(Cell.parseExactDate(text) == date, "\(seconds) → \(text)")
        }
    }
}
