//! The full-screen view: ratatui draws it through crossterm on the alternate screen in
//! raw mode. The header says when, how many CPUs and cgroups; the table has a row per
//! cgroup; under it, the selected row's sparkline of the sorted column; keys select,
//! sort, filter, pause and quit. The terminal is restored on every way out: q and
//! Ctrl-C (a key in raw mode), SIGTERM and SIGINT (wakes from session::forward_signals),
//! an error (a guard dropped) and a panic (a hook that restores before the message).
//! Ctrl-Z (a key in raw mode) and SIGTSTP stop it as procps top stops: the terminal
//! restored, then the process stopped; continued (SIGCONT), it takes the terminal again
//! and draws the whole screen. What the library has to say while the view holds the
//! screen (cgroups left out, runtimes that fail) is shown on the status line, the
//! last one, for a while.

use std::io::{stdout, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::crossterm::{cursor, execute};
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table, TableState};
use ratatui::{Frame, Terminal, TerminalOptions, Viewport};
use signal_hook::consts::{SIGCONT, SIGHUP, SIGTSTP};

use super::model::{Fold, Model, Shown, SortKey, HISTORY};
use super::{text, Top, Wake};
use crate::output::metric::Kind;
use crate::session;

/// The terminal's input, read on a thread of its own.
pub enum TermEvent {
    Key(KeyEvent),
    /// The terminal changed size (columns, rows): drawn again at once.
    Resize(u16, u16),
}

/// Whether the view has the terminal (raw mode, the alternate screen).
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Puts the terminal back as it was: raw mode off, the main screen, the cursor shown.
/// Once only: leaving the alternate screen again would put the cursor back where it was
/// when the view started, over what was printed since (a panic's message).
fn restore() {
    if TAKEN.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(stdout(), LeaveAlternateScreen, cursor::Show);
    }
}

/// Restores the terminal when dropped, whichever way the view ends.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        restore();
    }
}

/// Raw mode and the alternate screen, with a panic hook that restores the terminal
/// before the panic's message is printed (else it would be lost with the alternate
/// screen, and the shell left in raw mode).
fn take_terminal() -> Result<(Terminal<CrosstermBackend<Stdout>>, Restore)> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        hook(info);
    }));
    let guard = Restore;
    let (w, h) = enter()?;
    // A fixed viewport, resized on the terminal's resize events: ratatui would ask the
    // terminal's size at every frame otherwise (opening /dev/tty each time).
    let viewport = Viewport::Fixed(Rect::new(0, 0, w, h));
    let terminal = Terminal::with_options(
        CrosstermBackend::new(stdout()),
        TerminalOptions { viewport },
    )
    .context("terminal")?;
    Ok((terminal, guard))
}

/// Raw mode and the alternate screen (again, after a stop: the shell had the terminal
/// meanwhile); the terminal's size.
fn enter() -> Result<(u16, u16)> {
    TAKEN.store(true, Ordering::SeqCst);
    enable_raw_mode().context("cannot put the terminal in raw mode")?;
    execute!(stdout(), EnterAlternateScreen, cursor::Hide)
        .context("cannot use the alternate screen")?;
    ratatui::crossterm::terminal::size().context("the terminal's size")
}

/// Gives the terminal back and stops, as procps top does on Ctrl-Z; continued, takes
/// the terminal again.
fn suspend(terminal: &mut Terminal<CrosstermBackend<Stdout>>) -> Result<()> {
    restore();
    crate::sys::process::stop_self().context("cannot stop")?;
    resume(terminal)
}

/// Takes the terminal again after a stop (ours, or SIGSTOP's, which gave no warning),
/// at its size now, and has the next frame draw the whole screen.
fn resume(terminal: &mut Terminal<CrosstermBackend<Stdout>>) -> Result<()> {
    let (w, h) = enter()?;
    terminal
        .resize(Rect::new(0, 0, w, h))
        .context("cannot resize")?;
    terminal.clear().context("cannot draw")
}

/// Sends the terminal's keys and resizes as wakes, until the receiver is gone.
fn read_input(tx: mpsc::Sender<Wake>) {
    std::thread::spawn(move || loop {
        let input = match event::read() {
            Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => TermEvent::Key(k),
            Ok(Event::Resize(w, h)) => TermEvent::Resize(w, h),
            Ok(_) => continue,
            Err(_) => return,
        };
        if tx.send(Wake::Request(input)).is_err() {
            return;
        }
    });
}

/// What the view shows besides the model: the selection, the filter being typed, pause.
#[derive(Default)]
struct View {
    table: TableState,
    /// `/` was typed: keys go to the filter until Enter or Esc.
    editing: bool,
    paused: bool,
    /// What the library said last, and when: on the status line for STATUS_SHOWN.
    status: Option<(String, Instant)>,
}

/// How long a note stays on the status line.
const STATUS_SHOWN: Duration = Duration::from_secs(10);

impl View {
    /// Shows what `top` has to say since the last time, if anything.
    fn take_notes(&mut self, top: &mut Top) {
        let notes = top.take_notes();
        if !notes.is_empty() {
            let text = crate::output::people::escape_controls(&notes.0.join("; "));
            self.status = Some((text, Instant::now()));
        }
    }

    /// The status line's text, while it is shown.
    fn status(&self) -> Option<&str> {
        let (text, since) = self.status.as_ref()?;
        (since.elapsed() < STATUS_SHOWN).then_some(text.as_str())
    }
}

/// What a key asks for.
#[derive(PartialEq)]
enum Then {
    Draw,
    Quit,
    /// Ctrl-Z: stop, the terminal given back.
    Suspend,
}

pub fn run(
    top: &mut Top,
    tx: mpsc::Sender<Wake>,
    wakes: &mpsc::Receiver<Wake>,
    every: Duration,
    iterations: Option<u64>,
) -> Result<i32> {
    let (mut terminal, _restore) = take_terminal()?;
    session::forward_job_control(tx.clone())?;
    read_input(tx);
    let mut view = View::default();
    view.table.select(Some(0));
    let kinds = top.kinds();
    let mut next = Instant::now() + every;
    let mut done = 0;
    let mut draw_now = true;
    loop {
        view.take_notes(top);
        if draw_now {
            terminal
                .draw(|f| draw(f, &top.model, &top.header(), &mut view, &kinds))
                .context("cannot draw")?;
        }
        if iterations.is_some_and(|n| done >= n) {
            return Ok(0);
        }
        draw_now = true;
        match session::wait_until(wakes, Some(next)) {
            Some(Wake::Signal(SIGHUP) | Wake::Cgroups) => top.refresh_cgroups()?,
            Some(Wake::Signal(SIGTSTP)) => suspend(&mut terminal)?,
            Some(Wake::Signal(SIGCONT)) => resume(&mut terminal)?,
            Some(Wake::Signal(_)) => return Ok(0),
            Some(Wake::Request(TermEvent::Key(k))) => match key(k, top, &mut view) {
                Then::Quit => return Ok(0),
                Then::Suspend => suspend(&mut terminal)?,
                Then::Draw => {}
            },
            Some(Wake::Request(TermEvent::Resize(w, h))) => {
                terminal
                    .resize(Rect::new(0, 0, w, h))
                    .context("cannot resize")?;
            }
            Some(_) => draw_now = false,
            None => {
                if !view.paused {
                    top.refresh()?;
                    done += 1;
                }
                draw_now = !view.paused;
                next = (next + every).max(Instant::now());
            }
        }
    }
}

/// Acts on a key.
fn key(k: KeyEvent, top: &mut Top, view: &mut View) -> Then {
    let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
    match k.code {
        KeyCode::Char('c') if ctrl => return Then::Quit,
        KeyCode::Char('z') if ctrl => return Then::Suspend,
        _ => {}
    }
    let model = &mut top.model;
    if view.editing {
        match k.code {
            KeyCode::Enter => view.editing = false,
            KeyCode::Esc => {
                view.editing = false;
                model.filter.clear();
            }
            KeyCode::Backspace => {
                model.filter.pop();
            }
            KeyCode::Char(c) if model.filter.len() < 256 => model.filter.push(c),
            _ => {}
        }
        view.table.select(Some(0));
        return Then::Draw;
    }
    let at = view.table.selected().unwrap_or(0);
    match k.code {
        KeyCode::Char('q') => return Then::Quit,
        KeyCode::Up | KeyCode::Char('k') => view.table.select(Some(at.saturating_sub(1))),
        KeyCode::Down | KeyCode::Char('j') => view.table.select(Some(at + 1)),
        KeyCode::PageUp => view.table.select(Some(at.saturating_sub(10))),
        KeyCode::PageDown => view.table.select(Some(at + 10)),
        KeyCode::Home | KeyCode::Char('g') => view.table.select(Some(0)),
        KeyCode::End | KeyCode::Char('G') => view.table.select(Some(usize::MAX)),
        KeyCode::Char('s' | '>') => model.next_sort(true),
        KeyCode::Char('<') => model.next_sort(false),
        KeyCode::Char('r') => model.descending = !model.descending,
        KeyCode::Char('p') => view.paused = !view.paused,
        KeyCode::Char('t') => model.tree = !model.tree,
        KeyCode::Left | KeyCode::Right | KeyCode::Enter => fold(k.code, top, view),
        KeyCode::Char('/') => view.editing = true,
        KeyCode::Esc => model.filter.clear(),
        _ => {}
    }
    Then::Draw
}

/// In the tree view, folds (Left), unfolds (Right) or toggles (Enter) the selected
/// row; Left on a row that is not open selects its parent.
fn fold(code: KeyCode, top: &mut Top, view: &mut View) {
    let model = &mut top.model;
    if !model.tree {
        return;
    }
    let shown = model.shown();
    let Some(at) = view.table.selected().and_then(|s| shown.get(s)) else {
        return;
    };
    let (id, fold) = (at.row.cgroup.id, at.fold);
    drop(shown);
    match (code, fold) {
        (_, Fold::Leaf) | (KeyCode::Left, Fold::Closed) => {
            if code == KeyCode::Left {
                if let Some(parent) = model.parent_of(id) {
                    let shown = model.shown();
                    let row = shown.iter().position(|s| s.row.cgroup.id == parent);
                    view.table.select(row);
                }
            }
        }
        (KeyCode::Left, Fold::Open) => model.set_open(id, false),
        (KeyCode::Right, _) => model.set_open(id, true),
        (_, f) => model.set_open(id, f == Fold::Closed),
    }
}

/// The whole screen: header, table, sparkline, keys.
fn draw(
    f: &mut Frame,
    model: &Model,
    header: &text::ScreenHeader,
    view: &mut View,
    kinds: &[Kind],
) {
    let behind_lines = u16::from(model.culprits.is_some());
    let [top_line, table, spark, behind, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(4),
        Constraint::Length(behind_lines),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let rows = model.shown();
    let last = rows.len().saturating_sub(1);
    match view.table.selected() {
        Some(s) if s > last => view.table.select(Some(last)),
        Some(_) => {}
        None => view.table.select(Some(0)),
    }
    let mut head = header.line();
    let order = match model.descending {
        true => "largest first",
        false => "smallest first",
    };
    head += &format!("  by {}, {order}", model.sort_title());
    if view.paused {
        head += "  PAUSED";
    }
    f.render_widget(
        Paragraph::new(head).style(Style::new().add_modifier(Modifier::BOLD)),
        top_line,
    );
    draw_table(f, table, model, &rows, view, kinds);
    let selected = view.table.selected().and_then(|s| rows.get(s));
    draw_sparkline(f, spark, model, selected.map(|s| s.row));
    draw_culprits(f, behind, model, selected.map(|s| s.row));
    let keys = match (view.editing, view.status(), model.filter.is_empty()) {
        (true, ..) => format!("filter: {}_  (Enter keeps, Esc clears)", model.filter),
        (false, Some(status), _) => status.to_string(),
        (false, None, false) => format!(
            "filter: {}  / edit  Esc clear  s/</> sort  r reverse  p pause  q quit",
            model.filter
        ),
        (false, None, true) if model.tree => {
            "j/k move  ←/→ fold  s/</> sort  r reverse  / filter  t flat  p pause  q quit".into()
        }
        (false, None, true) => {
            "j/k move  s/</> sort  r reverse  / filter  t tree  p pause  q quit".into()
        }
    };
    f.render_widget(
        Paragraph::new(keys).style(Style::new().add_modifier(Modifier::REVERSED)),
        footer,
    );
}

/// The table: a row's name (with containers, its image too where the terminal is wide
/// enough), then its figures. Only the rows that fit are made into cells, the selected
/// one in view.
fn draw_table(
    f: &mut Frame,
    area: Rect,
    model: &Model,
    shown: &[Shown],
    view: &mut View,
    kinds: &[Kind],
) {
    // Spans, not strings: a string is split into lines first.
    let right = |s: String| Cell::from(Line::from(Span::raw(s)).alignment(Alignment::Right));
    let columns = TableColumns::new(model, shown, area.width);
    let first = match model.has_containers() {
        true => "CONTAINER",
        false => "CGROUP",
    };
    let mut heads = vec![Cell::from(text::head(
        first,
        model.sort == SortKey::Name,
        model.descending,
    ))];
    if columns.image.is_some() {
        heads.push(Cell::from("IMAGE"));
    }
    heads.extend(columns.figures.iter().map(|&i| {
        right(text::head(
            &model.columns[i].title,
            model.sort == SortKey::Column(i),
            model.descending,
        ))
    }));
    let fit = (area.height as usize).saturating_sub(1).max(1);
    let selected = view.table.selected().unwrap_or(0);
    let mut offset = view.table.offset().min(selected);
    if selected >= offset + fit {
        offset = selected + 1 - fit;
    }
    *view.table.offset_mut() = offset;
    let visible = shown.iter().skip(offset).take(fit);
    let rows = visible.map(|s| {
        let name = name_cell(s, model.tree, columns.name);
        let mut cells = vec![Cell::from(Line::from(Span::raw(name)))];
        if let Some(w) = columns.image {
            let image = text::tail(text::image(s.row), w);
            cells.push(Cell::from(Line::from(Span::raw(image))));
        }
        cells.extend(columns.figures.iter().map(|&i| {
            let v = s.row.values.get(i).copied().flatten();
            right(text::cell(&model.columns[i], kinds[i], v))
        }));
        Row::new(cells)
    });
    let table = Table::new(rows, columns.widths(model))
        .header(Row::new(heads).style(Style::new().add_modifier(Modifier::UNDERLINED)))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(Some(selected - offset));
    f.render_stateful_widget(table, area, &mut state);
}

/// How much room the name keeps before the image column is dropped: a terminal too
/// narrow for both shows the name, and the image only on --batch.
const NAME_ROOM: usize = 20;

/// The widest an image column gets; longer images lose their start (the registry), as
/// names do.
const IMAGE_WIDTH: usize = 30;

/// The least room the name keeps: a terminal too narrow for every figure beside it
/// leaves figures out, the empty ones (no row has a value: an event not counted here)
/// first, then from the right.
const NAME_MIN: usize = 16;

/// The widths of the table's text columns in a terminal `width` wide: the figures that
/// fit take theirs, the name what is left (at least NAME_MIN where a figure was left out,
/// else at least 8), the image (with containers) its longest (at most IMAGE_WIDTH) where
/// the name keeps NAME_ROOM.
struct TableColumns {
    name: usize,
    image: Option<usize>,
    /// The model's figure columns shown, in order.
    figures: Vec<usize>,
}

impl TableColumns {
    fn new(model: &Model, shown: &[Shown], width: u16) -> TableColumns {
        let figures = fitting(model, shown, width as usize);
        let numbers: usize = figures
            .iter()
            .map(|&i| text::figure_width(&model.columns[i]) + 1)
            .sum();
        let left = (width as usize).saturating_sub(numbers);
        let image = model.has_containers().then(|| {
            let longest = shown.iter().map(|s| text::image(s.row).chars().count());
            longest
                .chain(["IMAGE".len()])
                .max()
                .unwrap_or(0)
                .min(IMAGE_WIDTH)
        });
        // The image, a space, and the name in NAME_ROOM at least.
        let (name, image) = match image.filter(|w| left > NAME_ROOM + w) {
            Some(w) => (left - w - 1, Some(w)),
            None => (left.max(8), None),
        };
        TableColumns {
            name,
            image,
            figures,
        }
    }

    /// The constraints of the table's columns: the name fills what the others leave.
    fn widths(&self, model: &Model) -> Vec<Constraint> {
        let mut widths = vec![Constraint::Fill(1)];
        widths.extend(self.image.map(|w| Constraint::Length(w as u16)));
        widths.extend(
            self.figures
                .iter()
                .map(|&i| Constraint::Length(text::figure_width(&model.columns[i]) as u16)),
        );
        widths
    }
}

/// The model's figure columns that fit in `width` beside a name of NAME_MIN: all where
/// they do; else the empty ones go first, then the rightmost.
fn fitting(model: &Model, shown: &[Shown], width: usize) -> Vec<usize> {
    let cost = |i: usize| text::figure_width(&model.columns[i]) + 1;
    let mut figures: Vec<usize> = (0..model.columns.len()).collect();
    let fits = |f: &[usize]| f.iter().map(|&i| cost(i)).sum::<usize>() + NAME_MIN <= width;
    if fits(&figures) {
        return figures;
    }
    let empty = |i: usize| {
        shown
            .iter()
            .all(|s| s.row.values.get(i).copied().flatten().is_none())
    };
    while !fits(&figures) {
        match figures.iter().rposition(|&i| empty(i)) {
            Some(at) => figures.remove(at),
            None => match figures.pop() {
                Some(i) => i,
                None => break,
            },
        };
    }
    figures
}

/// A row's name in `width` characters (the start cut when too long): in the flat view
/// its name; in the tree view, indented by its depth after `▾` when open, `▸` when
/// folded, a top row's name and a nested row's last part.
fn name_cell(s: &Shown, tree: bool, width: usize) -> String {
    if !tree {
        return text::tail(s.row.name(), width);
    }
    let mark = match s.fold {
        Fold::Leaf => "  ",
        Fold::Open => "▾ ",
        Fold::Closed => "▸ ",
    };
    let indent = "  ".repeat(s.depth.min(8));
    let name = match s.depth {
        0 => s.row.name(),
        _ => s.row.leaf(),
    };
    let room = width.saturating_sub(indent.len() + 2).max(4);
    format!("{indent}{mark}{}", text::tail(name, room))
}

/// --runq: whom the selected row's cgroup waited behind in the last refresh, in CPUs'
/// worth of waiting.
fn draw_culprits(f: &mut Frame, area: Rect, model: &Model, row: Option<&super::model::Row>) {
    let (Some(all), Some(row)) = (&model.culprits, row) else {
        return;
    };
    let escape = crate::output::people::escape_controls;
    let text = match all.get(row.name()) {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|(by, cpus)| format!("{} {cpus:.3}", escape(by)))
            .collect::<Vec<_>>()
            .join("  "),
        _ => "nobody".into(),
    };
    f.render_widget(Paragraph::new(format!(" waited behind: {text}")), area);
}

/// The selected row's history of the sorted column (the first when sorted by name).
fn draw_sparkline(f: &mut Frame, area: Rect, model: &Model, row: Option<&super::model::Row>) {
    let column = match model.sort {
        SortKey::Column(c) => c,
        SortKey::Name => 0,
    };
    let Some(row) = row.filter(|_| !model.columns.is_empty()) else {
        f.render_widget(Block::new().borders(Borders::TOP), area);
        return;
    };
    let history: Vec<Option<f64>> = row.history(column).collect();
    let max = history.iter().flatten().fold(0.0f64, |m, v| m.max(*v));
    // Sparkline takes integers: the history scaled to its own largest figure.
    let bars: Vec<Option<u64>> = history
        .iter()
        .map(|v| {
            v.map(|v| {
                if max > 0.0 {
                    (v / max * 1000.0) as u64
                } else {
                    0
                }
            })
        })
        .collect();
    let title = format!(
        " {}: {}, last {} refreshes (max {:.3}) ",
        crate::output::people::escape_controls(row.name()),
        model.columns[column].title,
        HISTORY,
        max
    );
    f.render_widget(
        Sparkline::default()
            .block(Block::new().borders(Borders::TOP).title(title))
            .data(bars)
            .max(1000),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    use crate::top::model::Cgroup;
    use ratatui::backend::TestBackend;

    /// Three containers under top's default events: web (busybox, 0.5 CPUs), api (an
    /// image longer than IMAGE_WIDTH, 0.25 CPUs) and db (no image said, idle); cycles
    /// and instructions not counted.
    fn containers() -> (Model, Vec<Kind>) {
        use crate::event::Event;
        let events = [
            Event::plain("task-clock", 1, 1),
            Event::plain("context-switches", 1, 3),
            Event::plain("cpu-migrations", 1, 4),
            Event::plain("page-faults", 1, 2),
            Event::plain("cycles", 0, 0),
            Event::plain("instructions", 0, 1),
        ];
        let mut m = Model::new(&events);
        let kinds = text::kinds(&events, &m.columns);
        let container = |slot: usize, name: &str, image: Option<&str>| Cgroup {
            id: slot as u64 + 1,
            slot,
            path: format!("docker/{name}0123456789abcdef"),
            container: Some(name.into()),
            image: image.map(Into::into),
        };
        let api_image = "registry.example.com:5000/shop/api-server:1.2.3";
        m.set_cgroups(vec![
            container(0, "web", Some("busybox")),
            container(1, "api", Some(api_image)),
            container(2, "db", None),
        ]);
        let clock = [500_000_000, 250_000_000, 0];
        m.refresh(1e9, |slot, e| {
            let counter = match e {
                0 => clock[slot],
                1 => 10,
                _ => 0,
            };
            (e < 4).then_some(crate::reading::Reading {
                counter,
                enabled: 1,
                running: 1,
            })
        });
        (m, kinds)
    }

    /// The whole screen drawn on a terminal of `width` x `height`, line by line.
    fn screen(model: &Model, kinds: &[Kind], width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        let header = text::ScreenHeader {
            window: Duration::from_secs(1),
            cpus: 2,
            cgroups: model.nr_rows(),
            left_out: 0,
        };
        let mut view = View::default();
        terminal
            .draw(|f| draw(f, model, &header, &mut view, kinds))
            .unwrap();
        let buf = terminal.backend().buffer();
        (0..height)
            .map(|y| (0..width).map(|x| buf[(x, y)].symbol()).collect())
            .collect()
    }

    /// A table line: the name in `name` columns, the image (if any) in `image`, then
    /// each figure right-aligned in its column, one space between columns.
    fn table_line(name: (&str, usize), image: Option<(&str, usize)>, figures: &[&str]) -> String {
        let mut s = format!("{:<w$}", name.0, w = name.1);
        if let Some((i, w)) = image {
            s += &format!(" {i:<w$}");
        }
        for f in figures {
            s += &format!(" {f:>w$}", w = text::WIDTH);
        }
        s
    }

    /// The full screen shows each container's image between its name and its figures
    /// where the terminal is wide enough for the name to keep NAME_ROOM columns beside
    /// it (the image cut at its start past IMAGE_WIDTH, `-` where none was said), and
    /// drops it first where it is not: at 80x24 the name keeps the room left by the
    /// figures and the screen is whole (header, table, sparkline, keys on the last line).
    #[test]
    fn the_image_shows_where_the_terminal_is_wide_enough() {
        let (m, kinds) = containers();
        let figures = |cpus| [cpus, "10.0", "0.0", "0.0", "-", "-", "-"];
        let numbers = 7 * (text::WIDTH + 1);
        let narrow = screen(&m, &kinds, 80, 24);
        let name = 80 - numbers;
        assert!(narrow[0].starts_with("bperf top "), "{narrow:#?}");
        let heads = [
            "CPUsv", "cs/s", "migr/s", "faults/s", "cycles/s", "insn/s", "IPC",
        ];
        assert_eq!(narrow[1], table_line(("CONTAINER", name), None, &heads));
        assert_eq!(
            narrow[2],
            table_line(("web", name), None, &figures("0.500"))
        );
        assert_eq!(
            narrow[3],
            table_line(("api", name), None, &figures("0.250"))
        );
        assert_eq!(narrow[4], table_line(("db", name), None, &figures("0.000")));
        assert!(
            narrow[19].contains(" web: CPUs, last 60 refreshes"),
            "{narrow:#?}"
        );
        assert!(narrow[23].starts_with("j/k move"), "{narrow:#?}");
        // 100 columns: the image would take IMAGE_WIDTH and leave the name less than
        // NAME_ROOM: still dropped.
        let lines = screen(&m, &kinds, 100, 24);
        assert!(!lines[1].contains("IMAGE"), "{lines:#?}");
        assert_eq!(
            lines[2],
            table_line(("web", 100 - numbers), None, &figures("0.500"))
        );
        // 120 and 160: the image in its longest (cut to IMAGE_WIDTH), the name in
        // what is left, at least NAME_ROOM.
        for width in [120, 160] {
            let lines = screen(&m, &kinds, width, 24);
            let name = width as usize - numbers - IMAGE_WIDTH - 1;
            assert!(name >= NAME_ROOM);
            let line = |n, i, cpus| table_line((n, name), Some((i, IMAGE_WIDTH)), &figures(cpus));
            let head = table_line(("CONTAINER", name), Some(("IMAGE", IMAGE_WIDTH)), &heads);
            assert_eq!(lines[1], head, "{width}: {lines:#?}");
            assert_eq!(lines[2], line("web", "busybox", "0.500"));
            assert_eq!(
                lines[3],
                line("api", "…om:5000/shop/api-server:1.2.3", "0.250")
            );
            assert_eq!(lines[4], line("db", "-", "0.000"));
            assert!(lines[23].starts_with("j/k move"));
        }
    }

    /// A terminal too narrow for every figure beside a name of NAME_MIN leaves out the
    /// empty figures first (cycles/s, insn/s and IPC, not counted), then the rightmost;
    /// the name keeps NAME_MIN.
    #[test]
    fn figures_that_do_not_fit_leave_empty_ones_out_first() {
        let (m, kinds) = containers();
        let heads = |lines: &[String]| -> Vec<String> {
            lines[1]
                .split_whitespace()
                .skip(1)
                .map(str::to_string)
                .collect()
        };
        let lines = screen(&m, &kinds, 60, 24);
        assert_eq!(
            heads(&lines),
            ["CPUsv", "cs/s", "migr/s", "faults/s"],
            "{lines:#?}"
        );
        let lines = screen(&m, &kinds, 40, 24);
        assert_eq!(heads(&lines), ["CPUsv", "cs/s"], "{lines:#?}");
        assert!(lines[2].starts_with("web "), "{lines:#?}");
        let name = lines[1].len() - 2 * (text::WIDTH + 1);
        assert!(name >= NAME_MIN, "{lines:#?}");
    }

    /// A head longer than text::WIDTH (`preempt/s`, a run-queue column) widens its column, in
    /// the full screen as in --batch, rather than losing its start; the name takes what
    /// is left.
    #[test]
    fn a_long_head_widens_its_column() {
        use crate::event::Event;
        let events = [
            Event::plain("task-clock", 1, 1),
            Event::plain("bperf/preemptions/", 1, 3),
        ];
        let mut m = Model::new(&events);
        let kinds = text::kinds(&events, &m.columns);
        m.set_cgroups(vec![Cgroup {
            id: 1,
            slot: 0,
            path: "web".into(),
            container: None,
            image: None,
        }]);
        for width in [80, 120] {
            let lines = screen(&m, &kinds, width, 24);
            let name = width as usize - (text::WIDTH + 1) - ("preempt/s".len() + 2);
            let head = format!("{:<name$} {:>8} {:>10}", "CGROUP", "CPUsv", "preempt/s");
            assert_eq!(lines[1], head, "{width}: {lines:#?}");
        }
    }

    /// Set in the child that `a_panic_restores_the_terminal_before_its_message` starts.
    const CHILD: &str = "BPERF_TOP_PANIC_CHILD";

    /// The child: takes the terminal as the view does, then panics. Does nothing unless
    /// started by the test below.
    #[test]
    #[ignore = "the child of a_panic_restores_the_terminal_before_its_message"]
    fn view_that_panics() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let (_terminal, _restore) = take_terminal().unwrap();
        panic!("the view panicked here");
    }

    fn lflag(fd: &OwnedFd) -> libc::tcflag_t {
        // SAFETY: tcgetattr fills the termios it is given for an open terminal fd.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(fd.as_raw_fd(), &mut t), 0);
            t.c_lflag
        }
    }

    /// The view panicking on a terminal of its own (a pty, its controlling terminal):
    /// the terminal is back in the mode it was in (line editing and echo, not raw), and
    /// the panic's message comes after the view left the alternate screen, where it
    /// stays on the screen.
    #[test]
    fn a_panic_restores_the_terminal_before_its_message() {
        let (mut master, slave) = {
            let (mut m, mut s) = (-1, -1);
            let size = libc::winsize {
                ws_row: 24,
                ws_col: 80,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            // SAFETY: openpty fills the two fds; the other arguments may be null.
            let rc = unsafe {
                libc::openpty(
                    &mut m,
                    &mut s,
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    &size,
                )
            };
            assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
            // SAFETY: both fds were just opened and are owned here only.
            unsafe { (std::fs::File::from_raw_fd(m), OwnedFd::from_raw_fd(s)) }
        };
        let cooked = lflag(&slave);
        assert_ne!(cooked & libc::ICANON, 0);
        let io = || Stdio::from(slave.try_clone().unwrap());
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "top::screen::tests::view_that_panics"])
            .args(["--include-ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .stdin(io())
            .stdout(io())
            .stderr(io());
        // SAFETY: setsid and ioctl are async-signal-safe: the pty becomes the child's
        // controlling terminal, as a shell's terminal is a program's.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY, 0);
                Ok(())
            });
        }
        let mut child = command.spawn().unwrap();
        // Its copies of the slave closed: the master reads EIO once the child is gone.
        drop(command);
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            // EIO once the child and its copies of the slave are gone.
            while let Ok(n @ 1..) = master.read(&mut buf) {
                out.extend_from_slice(&buf[..n]);
            }
            out
        });
        let status = child.wait().unwrap();
        // The slave's modes are read from the parent's copy, after the child's end.
        assert!(!status.success(), "the child's test panicked");
        let after = lflag(&slave);
        drop(slave);
        let out = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
        assert_eq!(after, cooked, "the terminal's modes: {out:?}");
        let entered = out.find("\x1b[?1049h").expect(&out);
        let left = out.find("\x1b[?1049l").expect(&out);
        let message = out.find("the view panicked here").expect(&out);
        assert!(entered < left && left < message, "{out:?}");
    }
}
