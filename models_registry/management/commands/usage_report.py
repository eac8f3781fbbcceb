"""`usage_report --since YYYY-MM-DD [--until YYYY-MM-DD] [--group-by token,model,...] [--token NAME] [--csv]`.

The usage ledger (observe.ledger) per token and model over UTC days, as a table or as CSV for scripts.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from models_registry.models import ApiToken
from models_registry.observe import ledger_report

DAY_S = 86_400


def _date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise CommandError(f"{value!r} is not a date: write YYYY-MM-DD") from None


class Command(BaseCommand):
    """Print the usage ledger over a range of UTC days."""

    help = "Usage per API token and model (requests, tokens, compute seconds, errors) from the usage ledger."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", required=True, help="first UTC day, YYYY-MM-DD")
        parser.add_argument("--until", help="last UTC day, YYYY-MM-DD (default: today)")
        parser.add_argument("--group-by", default="token,model",
                            help=f"comma list of {', '.join(ledger_report.GROUPS)} (default: token,model)")
        parser.add_argument("--token", help="one token's usage (its name)")
        parser.add_argument("--model", help="one model's usage")
        parser.add_argument("--csv", action="store_true", help="CSV with a header line instead of a table")

    def handle(self, *args: Any, **options: Any) -> None:
        first = _date(options["since"])
        last = _date(options["until"]) if options["until"] else dt.datetime.now(dt.UTC).date()
        if last < first:
            raise CommandError(f"--until {last} is before --since {first}")
        groups = [g.strip() for g in options["group_by"].split(",") if g.strip()]
        unknown = [g for g in groups if g not in ledger_report.GROUPS]
        if unknown:
            raise CommandError(f"--group-by takes {', '.join(ledger_report.GROUPS)}, not {', '.join(unknown)}")
        tokens = None
        if options["token"]:
            found = ApiToken.objects.filter(name=options["token"]).values_list("pk", flat=True).first()
            if found is None:
                raise CommandError(f"no token named {options['token']!r}")
            tokens = [found]
        start = int(dt.datetime(first.year, first.month, first.day, tzinfo=dt.UTC).timestamp())
        end = int(dt.datetime(last.year, last.month, last.day, tzinfo=dt.UTC).timestamp()) + DAY_S
        rows = ledger_report.rows(tokens, start, end, groups, options["model"])
        if options["csv"]:
            ledger_report.write_csv(rows, self.stdout)
            return
        names = ledger_report.token_names(row["token_id"] for row in rows if "token_id" in row)
        header = f"{'token':<24} {'model':<28} {'requests':>10} {'input_tok':>12} {'output_tok':>12} " \
                 f"{'compute_s':>10} {'errors':>8}"
        self.stdout.write(header)
        for row in rows:
            token = names.get(row["token_id"], f"#{row['token_id']}") if "token_id" in row else "-"
            model = (row["model"] or "-") + (f" v{row['version']}" if "version" in row else "")
            when = f" @{dt.datetime.fromtimestamp(row['start_time'], dt.UTC):%Y-%m-%d %H:00}" if "start_time" in row \
                else ""
            self.stdout.write(f"{token:<24} {model + when:<28} {row['requests']:>10} {row['input_tokens']:>12} "
                              f"{row['output_tokens']:>12} {row['compute_seconds']:>10.3f} {row['errors']:>8}")
