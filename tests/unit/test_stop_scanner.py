"""Stop sequences over streamed text: hold back partial matches, never emit the stop."""

from __future__ import annotations

from backends.stop_scanner import StopScanner


def run(stops: tuple[str, ...], pieces: list[str]) -> tuple[str, bool]:
    scanner = StopScanner(stops)
    out = []
    for piece in pieces:
        out.append(scanner.feed(piece))
        if scanner.stopped:
            break
    out.append(scanner.flush())
    return "".join(out), scanner.stopped


def test_no_stops_passes_through() -> None:
    assert run((), ["ab", "c"]) == ("abc", False)


def test_stop_inside_one_piece() -> None:
    assert run(("\n",), ["hello\nworld"]) == ("hello", True)


def test_stop_across_pieces_is_never_emitted() -> None:
    scanner = StopScanner(("END",))
    assert scanner.feed("abcE") == "abc"
    assert scanner.feed("N") == ""
    assert scanner.feed("D tail") == ""
    assert scanner.stopped


def test_partial_match_released_when_it_diverges() -> None:
    scanner = StopScanner(("END",))
    assert scanner.feed("xEN") == "x"
    assert scanner.feed("Q") == "ENQ"
    assert not scanner.stopped


def test_held_text_flushed_at_end() -> None:
    assert run(("END",), ["abc", "EN"]) == ("abcEN", False)


def test_earliest_of_several_stops_wins() -> None:
    assert run(("c", "b"), ["abcd"]) == ("a", True)


def test_empty_stop_strings_are_ignored() -> None:
    assert run(("",), ["abc"]) == ("abc", False)


def test_the_stop_that_ended_it_is_named_as_vllm_s_stop_reason() -> None:
    scanner = StopScanner(("xyz", "q"))
    assert (scanner.feed("aaxy"), scanner.matched) == ("aa", None)
    assert (scanner.feed("zq"), scanner.matched) == ("", "xyz")  # the one the text was cut at
    assert StopScanner(("bc", "abcd")).feed("zabcd") == "z"
    tie = StopScanner(("ab", "a"))  # both start at the same place: the first given names it
    assert (tie.feed("xab"), tie.matched) == ("x", "ab")
    never = StopScanner(("END",))
    assert never.feed("abcEN") == "abc"
    assert never.flush() == "EN" and never.matched is None
