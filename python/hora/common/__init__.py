"""Parts shared by every front end: lifecycle, process sets, op handles."""
