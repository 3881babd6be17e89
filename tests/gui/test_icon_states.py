"""Icons in light and dark palettes: a disabled icon is drawn dimmer than an enabled one (under a
dark palette its mean brightness is clearly lower, under a light one clearly higher), the task
view's disabled actions show it, and a change of the desktop's colour scheme makes the icons
drawn again in the new palette's colours."""

from __future__ import annotations

import pytest

from gui import icons
from gui.qt import QApplication, QColor, QIcon, QPalette, Qt
from gui.task_view import TaskView
from gui.task_view.actions import START, STOP

TOOLBAR_ICONS = ("start", "stop", "resume", "promote", "export", "continue", "fork")


def palette(window: str, text: str) -> QPalette:
    """A whole palette of two colours, as a desktop's light or dark scheme gives one: disabled
    text half-way between them."""
    back, fore = QColor(window), QColor(text)
    grey = QColor((back.red() + fore.red()) // 2, (back.green() + fore.green()) // 2,
                  (back.blue() + fore.blue()) // 2)  # fmt: skip
    p = QPalette(fore, back)  # the roles Qt derives from a window text and a window colour
    for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive):
        for role in (QPalette.ColorRole.Window, QPalette.ColorRole.Base, QPalette.ColorRole.Button):
            p.setColor(group, role, back)
        for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text,
                     QPalette.ColorRole.ButtonText):  # fmt: skip
            p.setColor(group, role, fore)
        p.setColor(group, QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text,
                 QPalette.ColorRole.ButtonText):  # fmt: skip
        p.setColor(QPalette.ColorGroup.Disabled, role, grey)
    return p


DARK = ("#2b2b2b", "#f0f0f0")
LIGHT = ("#f5f5f5", "#1e1e1e")


@pytest.fixture
def with_palette(qtbot):
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    before = app.palette()

    def use(colours: tuple[str, str]) -> None:
        app.setPalette(palette(*colours))
        icons.clear_cache()

    yield use
    app.setPalette(before)
    icons.clear_cache()


def mean_brightness(qicon: QIcon, mode: QIcon.Mode, size: int = 24) -> float:
    """The mean brightness (0–255) of the icon's drawn pixels, weighted by their opacity."""
    image = qicon.pixmap(size, size, mode).toImage()
    total = weight = 0.0
    for y in range(image.height()):
        for x in range(image.width()):
            colour = image.pixelColor(x, y)
            alpha = colour.alphaF()
            if alpha > 0:
                total += alpha * (
                    0.299 * colour.red() + 0.587 * colour.green() + 0.114 * colour.blue()
                )
                weight += alpha
    assert weight > 0, "the icon drew nothing"
    return total / weight


@pytest.mark.parametrize("name", TOOLBAR_ICONS)
def test_a_disabled_icon_is_dimmer_than_an_enabled_one_under_a_dark_palette(with_palette, name):
    with_palette(DARK)
    drawn = icons.icon(name)
    enabled = mean_brightness(drawn, QIcon.Mode.Normal)
    disabled = mean_brightness(drawn, QIcon.Mode.Disabled)
    assert enabled > 200  # light on dark
    assert enabled - disabled > 60, (enabled, disabled)


@pytest.mark.parametrize("name", TOOLBAR_ICONS)
def test_a_disabled_icon_is_paler_than_an_enabled_one_under_a_light_palette(with_palette, name):
    with_palette(LIGHT)
    drawn = icons.icon(name)
    enabled = mean_brightness(drawn, QIcon.Mode.Normal)
    disabled = mean_brightness(drawn, QIcon.Mode.Disabled)
    assert enabled < 60  # dark on light
    assert disabled - enabled > 60, (enabled, disabled)


def test_an_icon_in_its_own_colours_fades_when_disabled(with_palette):
    with_palette(DARK)
    drawn = icons.icon("approve")
    image_on = drawn.pixmap(24, 24, QIcon.Mode.Normal).toImage()
    image_off = drawn.pixmap(24, 24, QIcon.Mode.Disabled).toImage()
    opacity = lambda image: sum(  # noqa: E731
        image.pixelColor(x, y).alphaF() for x in range(24) for y in range(24)
    )
    assert opacity(image_off) < 0.5 * opacity(image_on)


def test_the_task_views_disabled_actions_look_disabled_in_dark(qtbot, context, with_palette):
    with_palette(DARK)
    view = TaskView(context)
    qtbot.addWidget(view)
    view.refresh_icons()
    view.show()
    start, stop = view.buttons[START], view.buttons[STOP]
    start.setEnabled(True)
    stop.setEnabled(False)
    button_of = {a: view.toolbar.widgetForAction(a) for a in (start, stop)}
    # What the tool buttons draw: their icon in the mode their state asks for.
    on = mean_brightness(button_of[start].icon(), QIcon.Mode.Normal)
    off = mean_brightness(button_of[stop].icon(), QIcon.Mode.Disabled)
    assert on - off > 60, (on, off)


def test_a_colour_scheme_change_draws_the_icons_again_in_the_new_palette(
    qtbot, with_palette, monkeypatch
):
    app = QApplication.instance()
    with_palette(LIGHT)
    light = icons.icon("start")
    assert mean_brightness(light, QIcon.Mode.Normal) < 60
    heard = []
    icons.follow_colour_scheme(app, lambda: heard.append(app.palette().color(
        QPalette.ColorRole.WindowText).name()))  # fmt: skip
    # The desktop went dark: the style's palette for the scheme replaces the one set by hand.
    style = app.style()
    dark_palette = palette(*DARK)
    monkeypatch.setattr(style, "standardPalette", lambda: dark_palette)
    assert app.style() is style
    app.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert heard == ["#f0f0f0"]
    assert mean_brightness(icons.icon("start"), QIcon.Mode.Normal) > 200


def test_a_dark_screenshot_of_the_task_view_shows_disabled_actions_dimmer(
    qtbot, context, cairn, repo, with_palette, artifacts_dir
):
    """What is painted, not only what the icon holds: the toolbar under a dark palette, saved as
    a test artifact, with the disabled Stop's icon dimmer than the enabled Start's."""
    with_palette(DARK)
    task = cairn.tasks.new(repo, title="Dark", instructions="echo hi").task
    view = TaskView(context)
    qtbot.addWidget(view)
    view.resize(900, 500)
    view.refresh_icons()
    view.show()
    view.set_task(task.id)
    qtbot.waitUntil(lambda: view.data is not None, timeout=10_000)
    assert view.buttons[START].isEnabled() and not view.buttons[STOP].isEnabled()
    qtbot.wait(50)
    shot = view.grab()
    shot.save(str(artifacts_dir / "task-view-dark.png"))
    image = shot.toImage()
    ratio = shot.devicePixelRatio()

    def icon_brightness(action) -> float:
        button = view.toolbar.widgetForAction(action)
        top_left = button.mapTo(view, button.rect().topLeft())
        side = button.height()  # the icon sits at the button's left, within its height
        values = []
        for y in range(int(top_left.y() * ratio), int((top_left.y() + side) * ratio)):
            for x in range(int(top_left.x() * ratio), int((top_left.x() + side) * ratio)):
                c = image.pixelColor(x, y)
                values.append(0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue())
        values.sort()
        return sum(values[-40:]) / 40  # the icon's strokes: the brightest pixels of its square

    on, off = icon_brightness(view.buttons[START]), icon_brightness(view.buttons[STOP])
    assert on - off > 60, (on, off)
