"""A continuation's or fork's default title is the first line of what it was asked to do."""

from core.tasks import CHILD_TITLE_MAX, child_title


def test_the_first_line_with_its_spaces_collapsed():
    assert (
        child_title("\n  fix   the login\ttest \nthen more", "x (continued)")
        == "fix the login test"
    )


def test_a_long_line_is_shortened_at_a_word_boundary():
    title = child_title("word " * 40, "x (fork)")
    assert len(title) <= CHILD_TITLE_MAX and title.endswith("word…")
    command = "git commit -am 'rework the login flow so that sessions expire after an hour'"
    title = child_title(command, "x (continued)")
    assert len(title) <= CHILD_TITLE_MAX and title.endswith("…")
    assert command.startswith(title[:-1]) and command[len(title) - 1] == " "  # whole words


def test_a_single_very_long_word_is_still_cut():
    title = child_title("x" * 200, "x (fork)")
    assert len(title) == CHILD_TITLE_MAX and title.endswith("…")


def test_an_empty_message_keeps_the_fallback():
    assert child_title("  \n\t", "x (fork)") == "x (fork)"
